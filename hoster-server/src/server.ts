import type { Logger } from "@mkt/runtime/logger";
import { buildApp } from "./app.ts";
import type { HosterServerConfig } from "./config.ts";
import { ShutdownSignals } from "./shutdown-signals.ts";

export interface HosterServerHandle {
  /** Base URL, e.g. http://127.0.0.1:8090 (no trailing slash). */
  url: string;
  port: number;
  /** Stop accepting → finish running answers (proxied streams are cut after graceMs) → close. */
  close(graceMs?: number): Promise<void>;
}

/** Builds the app and listens on HOST:PORT (PORT 0 picks a free port). */
export async function startHosterServer(config: HosterServerConfig, log: Logger): Promise<HosterServerHandle> {
  const shutdown = new ShutdownSignals();
  const app = buildApp(config, { logger: log, shutdown });
  // A burst of new connections (a thousand streams starting at once) waits in the accept queue
  // instead of being dropped and retried a second or more later; Linux caps this at somaxconn.
  await app.listen({ host: config.HOST, port: config.PORT, backlog: 4096 });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.PORT;
  const host = config.HOST === "0.0.0.0" || config.HOST === "::" ? "127.0.0.1" : config.HOST;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  log.info(
    { url, mode: config.UPSTREAM_URL ? "proxy" : "demo", models: config.UPSTREAM_URL ? undefined : config.DEMO_MODELS },
    "hoster server listening",
  );
  return {
    url,
    port,
    async close(graceMs = 10_000) {
      const done = shutdown.begin(graceMs);
      // Node closes idle keep-alive connections once, when close starts; a connection whose
      // streamed answer ends later would hold close open until its keep-alive timeout.
      const sweep = setInterval(() => app.server.closeIdleConnections(), 50);
      try {
        await app.close();
      } finally {
        clearInterval(sweep);
        done();
      }
    },
  };
}
