import { afterAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { loadBillingConfig } from "../src/config.ts";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

// Billing alone sets the usage stream's replicas (USAGE_STREAM_REPLICAS); registry waits for the
// stream it made (services/registry/test/usage-stream-wait.test.ts).

const base = { SECRETS_KEY: "ab".repeat(32), TLS_MODE: "off" };

describe("USAGE_STREAM_REPLICAS", () => {
  it("is 1 by default and accepts 3 and 5", () => {
    expect(loadBillingConfig(base).USAGE_STREAM_REPLICAS).toBe(1);
    for (const n of [1, 3, 5]) {
      expect(loadBillingConfig({ ...base, USAGE_STREAM_REPLICAS: String(n) }).USAGE_STREAM_REPLICAS).toBe(n);
    }
  });

  it("refuses an even count, a count above JetStream's 5, and anything not a whole number, naming the variable", () => {
    for (const value of ["0", "2", "4", "6", "7", "-1", "1.5", "three", ""]) {
      expect(() => loadBillingConfig({ ...base, USAGE_STREAM_REPLICAS: value }), value).toThrow(
        /USAGE_STREAM_REPLICAS.*must be 1, 3 or 5/,
      );
    }
  });
});

describe("the usage stream billing makes", () => {
  const started: TestBilling[] = [];
  afterAll(async () => {
    for (const billing of started) await billing.close();
  });

  it("has the configured replicas: one on a single nats-server", async () => {
    const billing = await startTestBilling({ USAGE_STREAM_REPLICAS: "1" });
    started.push(billing);
    const nc = await connect({ servers: TEST_NATS_URL });
    try {
      const info = await (await jetstreamManager(nc)).streams.info(billing.names.usageStream);
      expect(info.config.num_replicas).toBe(1);
    } finally {
      await nc.close();
    }
  });

  it("refuses to start with 3 replicas on a single nats-server, saying which setting asked for them", async () => {
    await expect(startTestBilling({ USAGE_STREAM_REPLICAS: "3" })).rejects.toThrow(
      /usage stream .* with 3 replica\(s\) \(USAGE_STREAM_REPLICAS\) failed/,
    );
  });
});
