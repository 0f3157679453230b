import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { UsageBatch, UsageCompleted } from "@mkt/proto/events/v1/events";
import { USAGE_BATCH_HEADER } from "@mkt/runtime/usage-messages";
import {
  admitOnLease,
  ledgerInvariants,
  REQUEST_CHARGE_SQL,
  startTestBilling,
  type TestBilling,
} from "./billing-harness.ts";

// Messages of several events (docs/adr/0043-usage-events-batched-per-publish.md): request_id
// alone decides a charge, whatever message, message id or path brought the event.

let t: TestBilling;
let nc: NatsConnection;
beforeAll(async () => {
  t = await startTestBilling();
  nc = await connect({ servers: TEST_NATS_URL });
});
afterAll(async () => {
  await nc?.drain();
  await t?.close();
});

const tokens = { inputTokens: 100n, outputTokens: 150n }; // 275 micro-USD at the harness's prices

async function publishBatch(events: UsageCompleted[], msgID: string): Promise<void> {
  const headers = natsHeaders();
  headers.set(USAGE_BATCH_HEADER, "1");
  const batch = UsageBatch.fromPartial({
    events: events.map((event) => Buffer.from(UsageCompleted.encode(event).finish())),
    traceparents: events.map(() => ""),
    edgeId: "edge-batches-test",
    bootId: randomUUID(),
    sequence: 1n,
  });
  await jetstream(nc).publish(t.names.usageCompleted, UsageBatch.encode(batch).finish(), { msgID, headers });
}

describe("usage batches", () => {
  it("settles each event of a batch once: the batch redelivered, its event in another batch and through RecordUsage", async () => {
    const accountId = randomUUID();
    const first = await admitOnLease(t, { accountId, ...tokens });
    const second = await admitOnLease(t, { accountId, ...tokens });
    const other = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
    const id = `edge-batches-test.${randomUUID()}.1`;
    await publishBatch([first, second], id);
    // The same batch again under its id (a retry after a lost ack): JetStream keeps one.
    await publishBatch([first, second], id);
    // The same event in a batch of another id (as after the duplicate window) and through RecordUsage.
    await publishBatch([other, first], `edge-batches-test.${randomUUID()}.1`);
    await t.client.recordUsage({ events: [first, other] });
    await t.waitSettled();
    for (const event of [first, second, other]) {
      const records = await t.query(`select cost_micros from usage_records where request_id = $1`, [event.requestId]);
      expect(records).toEqual([{ cost_micros: "275" }]);
      const [charged] = await t.query(REQUEST_CHARGE_SQL, [event.requestId]);
      expect(charged!.v).toBe("275");
    }
    const [wallet] = await t.query(`select posted_micros, held_micros from wallets where account_id = $1`, [accountId]);
    expect(wallet).toEqual({ posted_micros: String(5_000_000 - 2 * 275), held_micros: "0" });
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });
});
