import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "./logger.ts";

/**
 * What the listener needs of a prom-client `Registry` (structurally, so this package does not
 * depend on prom-client: only the services that define metrics do).
 */
export interface MetricsSource {
  metrics(): Promise<string>;
  readonly contentType: string;
}

/** Resolves when the process can serve (its dependencies answer); rejects saying what is missing. */
export type ReadinessCheck = () => Promise<void>;

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

/**
 * The gRPC services' plain HTTP listener (METRICS_PORT), reachable without a client certificate
 * so the kubelet and Prometheus need none: `GET /metrics` (Prometheus text), `GET /healthz` (the
 * process is alive: 200 while it answers at all) and `GET /readyz` (200 when `ready` resolves,
 * 503 with the reason when not). Anything else is 404. `port` 0 picks a free one (tests).
 */
export async function startMetricsServer(
  host: string,
  port: number,
  registry: MetricsSource,
  log: Logger,
  ready: ReadinessCheck = async () => undefined,
): Promise<MetricsServer> {
  const text = (res: ServerResponse, status: number, body: string) =>
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end(`${body}\n`);
  const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (req.method !== "GET") return text(res, 404, "not found");
    if (path === "/healthz") return text(res, 200, "ok");
    if (path === "/readyz") {
      ready().then(
        () => text(res, 200, "ready"),
        (err: unknown) => text(res, 503, `not ready: ${(err as Error).message}`),
      );
      return;
    }
    if (path !== "/metrics") return text(res, 404, "not found");
    registry.metrics().then(
      (body) => res.writeHead(200, { "content-type": registry.contentType }).end(body),
      (err: unknown) => {
        log.warn({ err }, "collecting metrics failed");
        text(res, 500, "metrics unavailable");
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
