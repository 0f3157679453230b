import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.ts";
import { startMetricsServer, type MetricsServer } from "../src/metrics-server.ts";

const log = createLogger("metrics-server-test", "silent");
const registry = { metrics: async () => "up 1\n", contentType: "text/plain; version=0.0.4" };
let server: MetricsServer | undefined;
afterEach(async () => server?.close());

describe("the plain HTTP listener of a gRPC service", () => {
  it("answers the probes and Prometheus without any credentials", async () => {
    server = await startMetricsServer("127.0.0.1", 0, registry, log, async () => undefined);
    const base = `http://127.0.0.1:${server.port}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    expect(await (await fetch(`${base}/metrics`)).text()).toBe("up 1\n");
    expect((await fetch(`${base}/other`)).status).toBe(404);
  });

  it("reports unready with the reason while a dependency is missing, and stays alive", async () => {
    server = await startMetricsServer("127.0.0.1", 0, registry, log, async () => {
      throw new Error("NATS did not answer within 800 ms");
    });
    const base = `http://127.0.0.1:${server.port}`;
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.text()).toBe("not ready: NATS did not answer within 800 ms\n");
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  });
});
