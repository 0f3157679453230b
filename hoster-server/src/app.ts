import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Logger } from "@mkt/runtime/logger";
import { requireBearer } from "./bearer-auth.ts";
import type { HosterServerConfig } from "./config.ts";
import { demoRoutes } from "./demo/demo-routes.ts";
import { installErrorHandlers } from "./error-handler.ts";
import { proxyRoutes } from "./proxy/proxy-routes.ts";
import { ShutdownSignals } from "./shutdown-signals.ts";

export interface AppOptions {
  logger?: Logger;
  shutdown?: ShutdownSignals;
}

/** Chat prompts can be long; Fastify's 1 MiB default would refuse big contexts. */
const BODY_LIMIT = 16 * 1024 * 1024;

/**
 * The hoster server: GET /health (open), and behind the bearer token GET /v1/models and
 * POST /v1/chat/completions, served by the demo model or proxied to UPSTREAM_URL. Builds the app
 * only; nothing listens or connects until the caller does so.
 */
export function buildApp(config: HosterServerConfig, options: AppOptions = {}): FastifyInstance {
  const shutdown = options.shutdown ?? new ShutdownSignals();
  const app = Fastify({
    ...(options.logger ? { loggerInstance: options.logger } : { logger: false }),
    bodyLimit: BODY_LIMIT,
    // One line per request would dominate the log under benchmark load; errors are still logged.
    logController: new LogController({ disableRequestLogging: true }),
  }) as unknown as FastifyInstance;
  installErrorHandlers(app);

  app.get("/health", async () => ({ status: "ok" }));

  app.register(async (api) => {
    api.addHook("onRequest", requireBearer(config.HOSTER_SERVER_TOKEN));
    if (config.UPSTREAM_URL) {
      proxyRoutes(api, {
        upstreamUrl: config.UPSTREAM_URL,
        upstreamApiKey: config.UPSTREAM_API_KEY || undefined,
        shutdown,
      });
    } else {
      demoRoutes(api, {
        models: config.DEMO_MODELS,
        completionTokens: config.DEMO_COMPLETION_TOKENS,
        tokensPerSecond: config.DEMO_TOKENS_PER_SECOND,
        shutdown,
      });
    }
  });
  return app;
}
