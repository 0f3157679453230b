import { randomUUID } from "node:crypto";
import pg from "pg";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { startBilling } from "../src/server.ts";
import { admitOnLease, waitFor, type TestBilling, startTestBilling } from "./billing-harness.ts";

/** mkt_usage_events_settled_total by outcome, from a billing's /metrics. */
async function settledCounts(metricsPort: number): Promise<Record<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const counts: Record<string, number> = {};
  for (const [, outcome, value] of text.matchAll(/^mkt_usage_events_settled_total\{outcome="(\w+)"\} (\d+)$/gm)) {
    counts[outcome!] = Number(value);
  }
  return counts;
}

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

describe("a usage event a killed billing took and never acked", () => {
  // process-kill.test.ts at 24 clients found whole answers with no usage record 20 s after
  // billing's SIGKILL; the batch it had in hand waited for JetStream's ack wait (60 s then).
  it("settles on the restarted billing within seconds, not after a minute", async () => {
    const event = await admitOnLease(t, { accountId: randomUUID(), inputTokens: 10n, outputTokens: 20n });
    const port = t.billing.port;
    await t.billing.close();

    // The killed replica: it pulled the event and died before acking it.
    await t.publishUsage(event);
    const crashed = await connect({ servers: TEST_NATS_URL });
    const consumer = await jetstream(crashed).consumers.get(t.names.usageStream, t.names.settlerConsumer);
    const taken = await consumer.next({ expires: 5_000 });
    expect(taken?.info.deliveryCount).toBe(1);
    await crashed.close();

    const startedAt = Date.now();
    // The harness closes it at the end, in place of the one closed above.
    // On the same port: the harness's client keeps calling it.
    t.billing = await startBilling(
      { ...t.config, GRPC_PORT: port },
      createLogger("billing-test", process.env.TEST_LOG_LEVEL ?? "silent"),
    );
    const [record] = await waitFor(
      () => t.query(`select success, cost_micros from usage_records where request_id = $1`, [event.requestId]),
      (rows) => rows.length > 0,
      15_000,
    );
    const settledMs = Date.now() - startedAt;
    expect(record).toEqual({ success: true, cost_micros: "35" });
    // The ack wait is 5 s; a minute's would time the wait above out.
    expect(settledMs).toBeLessThan(10_000);
  }, 30_000);

  it("is not delivered again while a live billing is still settling it (a batch slower than the ack wait)", async () => {
    const event = await admitOnLease(t, { accountId: randomUUID(), inputTokens: 10n, outputTokens: 20n });
    const before = (await settledCounts(t.billing.metricsPort)).settled ?? 0;
    // A second replica pulls too: an event delivered again would reach it.
    const replica = await startBilling({ ...t.config, GRPC_PORT: 0 }, createLogger("billing-test", "silent"));
    // The wallet locked for longer than the ack wait: the batch waits on the lock meanwhile.
    const locker = new pg.Client({ connectionString: t.config.DATABASE_URL, options: "-c search_path=billing" });
    await locker.connect();
    try {
      await locker.query("begin");
      await locker.query("select 1 from wallets where account_id = $1 for update", [event.accountId]);
      await t.publishUsage(event);
      await new Promise((resolve) => setTimeout(resolve, 8_000));
      await locker.query("commit");
    } finally {
      await locker.end();
    }
    await t.waitSettled();
    // Delivered once: neither replica settled it a second time (a duplicate).
    const settled = [await settledCounts(t.billing.metricsPort), await settledCounts(replica.metricsPort)];
    await replica.close();
    expect(settled.map((counts) => counts.duplicate ?? 0)).toEqual([0, 0]);
    expect((settled[0]!.settled ?? 0) - before + (settled[1]!.settled ?? 0)).toBe(1);
    const records = await t.query(`select cost_micros from usage_records where request_id = $1`, [event.requestId]);
    expect(records).toEqual([{ cost_micros: "35" }]);
  }, 30_000);
});
