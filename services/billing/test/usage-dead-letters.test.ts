import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import pg from "pg";
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

// Dead letters, never drops: billing's consumer keeps an event it cannot decode, and one that
// fails to settle on every delivery, in usage_dead_letters, and acks their message only once the
// letter is committed; the operator's replay settles the second once its cause is gone, once.

let t: TestBilling;
let nc: NatsConnection;
/** A second connection that holds a lock on usage_dead_letters while the test looks at the stream. */
let locker: pg.Client;
beforeAll(async () => {
  t = await startTestBilling();
  nc = await connect({ servers: TEST_NATS_URL });
  locker = new pg.Client({ connectionString: t.config.DATABASE_URL, options: "-c search_path=billing" });
  await locker.connect();
});
afterAll(async () => {
  await locker?.end();
  await nc?.drain();
  await t?.close();
});

const tokens = { inputTokens: 100n, outputTokens: 150n }; // 275 micro-USD at the harness's prices

/** Publishes events' bytes as one UsageBatch message, as an edge does. */
async function publishBatch(events: Uint8Array[]): Promise<void> {
  const headers = natsHeaders();
  headers.set(USAGE_BATCH_HEADER, "1");
  const batch = UsageBatch.fromPartial({
    events: events.map((bytes) => Buffer.from(bytes)),
    traceparents: events.map(() => ""),
    edgeId: "edge-dead-letters-test",
    bootId: randomUUID(),
    sequence: 1n,
  });
  await jetstream(nc).publish(t.names.usageCompleted, UsageBatch.encode(batch).finish(), {
    msgID: `batch-${randomUUID()}`,
    headers,
  });
}

async function consumerInfo() {
  const jsm = await jetstreamManager(nc);
  return jsm.consumers.info(t.names.usageStream, t.names.settlerConsumer);
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Whether a statement of billing's waits for the lock the test holds on usage_dead_letters. */
async function letterInsertWaiting(): Promise<boolean> {
  const rows = await t.query<{ n: number }>(
    `select count(*)::int as n from pg_locks l join pg_class c on c.oid = l.relation
     where c.relname = 'usage_dead_letters' and not l.granted`,
  );
  return rows[0]!.n > 0;
}

/** Holds usage_dead_letters locked while `look` runs; billing's letter waits, and so must its ack. */
async function withLettersLocked(look: () => Promise<void>): Promise<void> {
  await locker.query("begin");
  await locker.query("lock table usage_dead_letters in access exclusive mode");
  try {
    await look();
  } finally {
    await locker.query("commit");
  }
}

const records = (requestId: string) =>
  t.query(`select cost_micros from usage_records where request_id = $1`, [requestId]);

describe("usage dead letters", () => {
  it("keeps an undecodable event of a batch, settles the others, and acks the message only after the letter commits", async () => {
    const good = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
    // A valid event's bytes with a field of wire type 7 (which protobuf does not have) after them.
    const undecodable = new Uint8Array([...UsageCompleted.encode(good).finish().slice(0, 10), 0x0f, 0xff]);
    await withLettersLocked(async () => {
      await publishBatch([UsageCompleted.encode(good).finish(), undecodable]);
      expect(await until(letterInsertWaiting, Boolean, 15_000)).toBe(true);
      // The good event is settled, but its message waits for the letter: not acked.
      expect(await records(good.requestId)).toEqual([{ cost_micros: "275" }]);
      expect((await consumerInfo()).num_ack_pending).toBe(1);
    });
    await t.waitSettled();
    const letters = await t.query(`select request_id, reason, attempts from usage_dead_letters where data = $1`, [
      Buffer.from(undecodable),
    ]);
    expect(letters).toEqual([
      { request_id: null, reason: expect.stringMatching(/^undecodable usage event/), attempts: 1 },
    ]);
  });

  it("keeps an event that fails to settle on every delivery, acked only after its letter commits; replay settles it once the cause is gone", async () => {
    const failing = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
    // The injected fault: PostgreSQL refuses this request's usage record (not an outage).
    await t.db.query(`
      create function refuse_usage_record() returns trigger language plpgsql as $$
      begin
        if new.request_id = '${failing.requestId}' then raise exception 'injected settlement fault'; end if;
        return new;
      end $$`);
    await t.db.query(
      `create trigger refuse_usage_record before insert on usage_records for each row execute function refuse_usage_record()`,
    );
    await withLettersLocked(async () => {
      await publishBatch([UsageCompleted.encode(failing).finish()]);
      // Ten deliveries, 5 s apart, then the letter: it waits for the lock, and the message with it.
      expect(await until(letterInsertWaiting, Boolean, 90_000)).toBe(true);
      const info = await consumerInfo();
      expect(info.num_ack_pending).toBe(1);
      expect(info.num_redelivered).toBeGreaterThan(0);
    });
    await t.waitSettled();
    expect(await records(failing.requestId)).toEqual([]);
    const { letters } = await t.client.listUsageDeadLetters({});
    const letter = letters.find((l) => l.requestId === failing.requestId);
    expect(letter).toMatchObject({
      reason: expect.stringMatching(/^settlement failed 10 times: .*injected settlement fault/),
      attempts: 10,
    });
    expect(UsageCompleted.decode(letter!.data)).toEqual(failing);

    // Still failing: the replay leaves it listed, with its new reason.
    const stillFailing = await t.client.replayUsageDeadLetters({ ids: [letter!.id] });
    expect(stillFailing).toMatchObject({ replayed: 0, failed: [{ id: letter!.id }] });

    // The cause fixed: replay settles it, once, however often it runs.
    await t.db.query(`drop trigger refuse_usage_record on usage_records`);
    const replayed = await t.client.replayUsageDeadLetters({ ids: [] });
    expect(replayed.replayed).toBeGreaterThanOrEqual(1);
    expect(replayed.failed.map((l) => l.id)).not.toContain(letter!.id);
    expect(await t.client.replayUsageDeadLetters({ ids: [letter!.id] })).toEqual({ replayed: 0, failed: [] });
    // The same event through the stream again: a duplicate.
    await publishBatch([UsageCompleted.encode(failing).finish()]);
    await t.waitSettled();
    expect(await records(failing.requestId)).toEqual([{ cost_micros: "275" }]);
    const [charged] = await t.query(REQUEST_CHARGE_SQL, [failing.requestId]);
    expect(charged!.v).toBe("275");
    expect((await t.client.listUsageDeadLetters({})).letters.map((l) => l.requestId)).not.toContain(failing.requestId);
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  }, 150_000);
});
