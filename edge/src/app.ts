import cookie from "@fastify/cookie";
import Fastify, { LogController, type FastifyInstance } from "fastify";
import type { Registry } from "prom-client";
import { newRequestId } from "@mkt/runtime/ids";
import type { Logger } from "@mkt/runtime/logger";
import { setHttpRoute, traceResponseHeader } from "@mkt/runtime/trace-context";
import type { Backends } from "./backends.ts";
import type { PromptTokenCounter } from "./chat/prompt-tokens.ts";
import type { EdgeConfig } from "./config.ts";
import type { RelayDeps } from "./relay/relay-answer.ts";
import type { LeaseTable } from "./leases/lease-table.ts";
import type { IsolationWatch } from "./leases/isolation-watch.ts";
import type { PrincipalCache } from "./principal-cache.ts";
import type { RoutingTable } from "./routing/routing-table.ts";
import { adminAuth } from "./plugins/admin-auth.ts";
import { apiKeyAuth } from "./plugins/api-key-auth.ts";
import { installCsrfGuard, sessionAuth } from "./plugins/session-auth.ts";
import { frameworkErrorReply, installErrorHandler } from "./plugins/error-handler.ts";
import { installJsonBodyParser } from "./plugins/json-body.ts";
import { installMetrics } from "./plugins/metrics.ts";
import { servePortal } from "./plugins/portal-static.ts";
import { installSecurityHeaders } from "./plugins/security-headers.ts";
import { registerOpenApi } from "./plugins/openapi.ts";
import { installValidation } from "./plugins/validation.ts";
import { accountRoutes } from "./routes/accounts.ts";
import { adminRoutes } from "./routes/admin.ts";
import { chatCompletionRoutes } from "./routes/chat-completions.ts";
import { embeddingsRoutes } from "./routes/embeddings.ts";
import { responsesRoutes } from "./routes/responses.ts";
import { messagesRoutes } from "./routes/messages.ts";
import { earningsRoutes } from "./routes/earnings.ts";
import { healthRoutes, type Readiness } from "./routes/health.ts";
import { hosterRoutes } from "./routes/hosters.ts";
import { hosterSubscriberRoutes } from "./routes/hoster-subscribers.ts";
import { keyRoutes } from "./routes/keys.ts";
import { modelRoutes } from "./routes/models.ts";
import { productRoutes } from "./routes/products.ts";
import type { RouteDeps } from "./routes/route-deps.ts";
import { sessionRoutes } from "./routes/sessions.ts";
import { subscriptionRoutes } from "./routes/subscriptions.ts";
import { usageRoutes } from "./routes/usage.ts";
import { usageExportRoutes } from "./routes/usage-export.ts";
import { generationRoutes } from "./routes/generations.ts";
import { usageReportRoutes } from "./routes/usage-reports.ts";

export interface AppDeps {
  config: EdgeConfig;
  log: Logger;
  backends: Backends;
  principals: PrincipalCache;
  /** Registry's routing table, kept current by WatchCatalog (server.ts watches it). */
  routing: RoutingTable;
  promptTokens: PromptTokenCounter;
  leases: LeaseTable;
  relay: RelayDeps;
  readiness: Readiness;
  /** Aborts when the shutdown grace period is over (see RouteDeps.shutdown). */
  shutdown: AbortSignal;
  /** The edge's bound on running cut off from billing (see RouteDeps.isolation). */
  isolation: IsolationWatch;
  /** The Prometheus registry GET /metrics shows (the relay's metrics are in it too). */
  metrics: Registry;
}

/**
 * The edge's HTTP surface: the public REST and OpenAI-compatible API, translated into gRPC calls.
 * It holds no business rules and no database. Builds the app only; nothing listens yet.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.log,
    bodyLimit: deps.config.BODY_LIMIT_BYTES,
    // request.ip honours X-Forwarded-For only from these hops (per-IP sign-up limits).
    trustProxy: deps.config.TRUSTED_PROXIES.length > 0 ? deps.config.TRUSTED_PROXIES : false,
    // Our own id for every request: it keys the admitted request and its usage record, so a
    // client-supplied one is never trusted. A UUIDv7, time-ordered (docs/adr/0045-usage-records-append.md).
    genReqId: () => newRequestId(),
    // One access-log line per request comes from the onResponse hook below, not Fastify's pair.
    logController: new LogController({ requestIdLogLabel: "requestId", disableRequestLogging: true }),
    // A streamed answer can run for minutes; Node's default request timeout would cut it.
    requestTimeout: 0,
    frameworkErrors: frameworkErrorReply,
  }) as unknown as FastifyInstance;

  app.decorateRequest("principal", null);
  app.decorateRequest("session", null);
  installSecurityHeaders(app);
  await app.register(cookie);
  installCsrfGuard(app);
  installJsonBodyParser(app);
  installValidation(app);
  installErrorHandler(app);
  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    // With tracing on (docs/deploy.md, "Reading a trace"), the id to look the request up by.
    const traceresponse = traceResponseHeader();
    if (traceresponse) {
      reply.header("traceresponse", traceresponse);
      if (request.routeOptions.url) setHttpRoute(request.routeOptions.url);
    }
  });
  app.addHook("onResponse", async (request, reply) => {
    request.log.info(
      { method: request.method, url: request.routeOptions.url, status: reply.statusCode, ms: reply.elapsedTime },
      "request",
    );
  });
  const chatMetrics = installMetrics(app, deps.metrics, deps.routing);
  deps.leases.observeGrants(chatMetrics.grant);
  await registerOpenApi(app);

  const routeDeps: RouteDeps = {
    backends: deps.backends,
    promptTokens: deps.promptTokens,
    leases: deps.leases,
    routing: deps.routing,
    relay: deps.relay,
    chatMetrics,
    shutdown: deps.shutdown,
    isolation: deps.isolation,
    auth: apiKeyAuth(deps.backends, deps.principals),
    session: sessionAuth(deps.backends),
  };
  healthRoutes(app, deps.readiness);
  accountRoutes(app, routeDeps);
  keyRoutes(app, routeDeps);
  modelRoutes(app, routeDeps);
  usageRoutes(app, routeDeps);
  usageReportRoutes(app, routeDeps);
  usageExportRoutes(app, routeDeps);
  generationRoutes(app, routeDeps);
  subscriptionRoutes(app, routeDeps);
  chatCompletionRoutes(app, routeDeps);
  embeddingsRoutes(app, routeDeps);
  responsesRoutes(app, routeDeps);
  // A scope of its own: the Messages API answers errors in Anthropic's shape.
  await app.register(async (scope) => messagesRoutes(scope, routeDeps));
  sessionRoutes(app, routeDeps);
  hosterRoutes(app, routeDeps);
  productRoutes(app, routeDeps);
  hosterSubscriberRoutes(app, routeDeps);
  earningsRoutes(app, routeDeps);
  adminRoutes(app, routeDeps, adminAuth(deps.config.ADMIN_TOKEN));
  await servePortal(app, deps.config.PORTAL_DIR);
  return app;
}
