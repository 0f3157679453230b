import type { Logger } from "@mkt/runtime/logger";
import { connectNats, eventNames } from "@mkt/runtime/nats";
import { buildApp } from "./app.ts";
import { connectBackends } from "./backends.ts";
import { PromptTokenCounter } from "./chat/prompt-tokens.ts";
import type { EdgeConfig } from "./config.ts";
import { followKeyRevocations } from "./key-revocations.ts";
import { PrincipalCache } from "./principal-cache.ts";
import { trackUnusedConnections } from "./unused-connections.ts";

export interface EdgeHandle {
  /** Base URL, e.g. http://127.0.0.1:8080 (no trailing slash). */
  url: string;
  port: number;
  /** Readiness off → stop accepting → let running answers finish (up to graceMs) → NATS drain. */
  close(graceMs?: number): Promise<void>;
}

/** Connects the edge's backends and NATS, builds the app and listens on HOST:PORT (0: a free port). */
export async function startEdge(config: EdgeConfig, log: Logger): Promise<EdgeHandle> {
  const backends = connectBackends(config);
  const nc = await connectNats(config.NATS_URL, "edge", log).catch((err: unknown) => {
    backends.close();
    throw err;
  });
  const principals = new PrincipalCache(config.PRINCIPAL_CACHE_TTL_MS);
  const stopRevocations = followKeyRevocations(nc, eventNames(config.EVENTS_PREFIX).keysRevoked, principals, log);
  await nc.flush(); // the subscription is live at the server before any key is cached
  const promptTokens = new PromptTokenCounter();
  let closing = false;

  const app = await buildApp({
    config,
    log,
    backends,
    principals,
    promptTokens,
    readiness: {
      async check() {
        if (closing) throw new Error("shutting down");
        if (nc.isClosed()) throw new Error("NATS connection closed");
        const unready = await backends.unready(1_000);
        if (unready.length > 0) throw new Error(`cannot reach ${unready.join(", ")}`);
      },
    },
  });
  const connections = trackUnusedConnections(app.server);
  await app.listen({ host: config.HOST, port: config.PORT });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.PORT;
  const host = config.HOST === "0.0.0.0" || config.HOST === "::" ? "127.0.0.1" : config.HOST;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  log.info({ url }, "edge listening");

  return {
    url,
    port,
    async close(graceMs = 10_000) {
      closing = true;
      // Streams still running after the grace period are cut; their usage is still recorded
      // by the registry, which sees the cancellation.
      const cut = setTimeout(() => app.server.closeAllConnections(), graceMs);
      try {
        const closed = app.close();
        connections.destroyUnused();
        await closed;
      } finally {
        clearTimeout(cut);
      }
      stopRevocations();
      await nc.drain();
      await promptTokens.close();
      backends.close();
    },
  };
}
