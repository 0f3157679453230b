import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "@mkt/runtime/logger";
import type { Registry } from "prom-client";

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

/**
 * A plain HTTP listener for Prometheus: `GET /metrics` answers the registry's text exposition,
 * anything else 404. Registry's API is gRPC, so this is its only HTTP port (METRICS_PORT).
 */
export async function startMetricsServer(
  host: string,
  port: number,
  registry: Registry,
  log: Logger,
): Promise<MetricsServer> {
  const server = createServer((req, res) => {
    if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType }).end(text),
      (err: unknown) => {
        log.warn({ err }, "collecting metrics failed");
        res.writeHead(500, { "content-type": "text/plain" }).end("metrics unavailable\n");
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
