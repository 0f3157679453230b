import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { settleUsageBatch } from "../src/settlement/settle-batch.ts";
import { maintainUsagePartitions } from "../src/usage/usage-partitions.ts";
import { reconcile } from "../src/wallets/reconciliation.ts";
import {
  admitOnLease,
  REQUEST_CHARGE_SQL,
  startTestBilling,
  type TestBilling,
  openTestOrm,
} from "./billing-harness.ts";

// Usage records are partitioned by month on created_at and keyed on (request_id, created_at)
// (docs/adr/0045-usage-records-append.md). What keeps a request settled once is that its
// created_at comes from its event, never from the settler's clock: here the settler's clock moves
// a month on between deliveries, into another partition, and the request still has one record.

let t: TestBilling;
let orm: Orm;
let clock = new Date();
const log = createLogger("usage-records-append-test", "silent");
const DAY = 86_400_000;
beforeAll(async () => {
  t = await startTestBilling({ STARTING_CREDIT_USD: "0.01" }, { clock: () => clock });
  orm = await openTestOrm(t, log);
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
});

const tokens = { inputTokens: 100n, outputTokens: 150n }; // 275 micro-USD at the harness's prices
const recordsOf = (requestId: string) =>
  t.query<{ created_at: Date; part: string }>(
    `select created_at, tableoid::regclass::text as part from usage_records where request_id = $1`,
    [requestId],
  );
const chargeOf = async (requestId: string) =>
  (await t.query<{ v: string | null }>(REQUEST_CHARGE_SQL, [requestId]))[0]!.v;
const lettersOf = (requestId: string) =>
  t.query<{ reason: string }>(`select reason from usage_dead_letters where request_id = $1`, [requestId]);

describe("usage records that append", () => {
  it("keeps one record and one charge for an event delivered three ways while the settler's clock moves a month on", async () => {
    const accountId = randomUUID();
    // One event with the edge's started_at, one whose time is only in its UUIDv7 id.
    const stamped = await admitOnLease(t, { accountId, ...tokens });
    const bare = await admitOnLease(t, { accountId, ...tokens });
    bare.startedAt = "";
    await Promise.all([t.publishUsage(stamped), t.publishUsage(bare)]);
    await t.waitSettled();
    const first = { stamped: await recordsOf(stamped.requestId), bare: await recordsOf(bare.requestId) };
    expect(first.stamped).toHaveLength(1);
    expect(first.stamped[0]!.created_at.toISOString()).toBe(stamped.startedAt);
    expect(first.bare).toHaveLength(1);
    // The v7 id's time, to the millisecond.
    expect(first.bare[0]!.created_at.getTime()).toBe(parseInt(bare.requestId.replace(/-/g, "").slice(0, 12), 16));

    // The settler's clock is now 40 days on: another month, another partition.
    clock = new Date(clock.getTime() + 40 * DAY);
    await t.billing.maintainUsagePartitions();
    // 1. The same batch delivered again (its ack lost).
    const again = await orm.em.fork().transactional((em) => settleUsageBatch(em, [stamped, bare], log, clock));
    expect(again).toEqual(["duplicate", "duplicate"]);
    // 2. Regrouped with another request through the edge's RecordUsage.
    const other = await admitOnLease(t, { accountId, ...tokens });
    await t.client.recordUsage({ events: [other, bare, stamped] });
    // 3. Under a message id JetStream's dedup window no longer remembers.
    await t.publishUsage(stamped, `${stamped.requestId}-after-the-window`);
    await t.publishUsage(bare, `${bare.requestId}-after-the-window`);
    await t.waitSettled();

    expect(await recordsOf(stamped.requestId)).toEqual(first.stamped);
    expect(await recordsOf(bare.requestId)).toEqual(first.bare);
    expect(await chargeOf(stamped.requestId)).toBe("275");
    expect(await chargeOf(bare.requestId)).toBe("275");
    const [wallet] = await t.query<{ v: string }>(
      `select posted_micros::text as v from wallets where account_id = $1`,
      [accountId],
    );
    expect(wallet!.v).toBe(String(10_000 - 3 * 275)); // three requests, each charged once
    expect(await reconcile((sql) => t.query(sql))).toEqual([]);
  });

  it("dead-letters an event whose request id is not a UUID, or that carries no time, and settles the rest", async () => {
    const accountId = randomUUID();
    const good = await admitOnLease(t, { accountId, ...tokens });
    const named = UsageCompleted.fromPartial({ ...good, requestId: `req_${randomUUID()}` });
    // A random (v4) id carries no time: without started_at there is none to record it at.
    const timeless = UsageCompleted.fromPartial({ ...good, requestId: randomUUID(), startedAt: "" });
    // A v7 id whose time is past any date PostgreSQL reads.
    const farOff = UsageCompleted.fromPartial({
      ...good,
      requestId: "ffffffff-ffff-7fff-bfff-ffffffffffff",
      startedAt: "",
    });
    await t.client.recordUsage({ events: [named, timeless, farOff, good] });
    expect(await lettersOf(named.requestId)).toEqual([
      { reason: `request_id ${JSON.stringify(named.requestId)} is not a UUID` },
    ]);
    const timeReason = "no time to record it at: started_at and the request id's (UUIDv7) are missing or unreadable";
    expect(await lettersOf(timeless.requestId)).toEqual([{ reason: timeReason }]);
    expect(await lettersOf(farOff.requestId)).toEqual([{ reason: timeReason }]);
    expect(await recordsOf(good.requestId)).toHaveLength(1);
    // Through JetStream alike.
    const streamed = UsageCompleted.fromPartial({ ...good, requestId: "not a uuid" });
    await t.publishUsage(streamed, `bad-${randomUUID()}`);
    await t.waitSettled();
    expect(await lettersOf("not a uuid")).toHaveLength(1);
  });

  it("makes the coming months' partitions, moves the default's rows into a month made late, and detaches past the retention", async () => {
    const em = () => orm.em.fork();
    const now = new Date(Date.UTC(2031, 4, 15)); // May 2031: no partition yet
    const partitions = async () =>
      (
        await t.query<{ name: string }>(
          `select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
           where i.inhparent = 'usage_records'::regclass order by 1`,
        )
      ).map((r) => r.name);
    // A record of a month with no partition yet lands in the default partition: no insert fails.
    const early = await admitOnLease(t, { accountId: randomUUID(), ...tokens, startedAt: now.toISOString() });
    await t.client.recordUsage({ events: [early] });
    expect((await recordsOf(early.requestId))[0]!.part).toBe("usage_records_default");

    const made = await maintainUsagePartitions(em(), now, 0);
    expect(made).toEqual({
      made: ["usage_records_y2031m05", "usage_records_y2031m06", "usage_records_y2031m07"],
      detached: [],
    });
    // Moved into its month's partition, and still one record, found by its id.
    expect((await recordsOf(early.requestId)).map((r) => r.part)).toEqual(["usage_records_y2031m05"]);
    expect(await maintainUsagePartitions(em(), now, 0)).toEqual({ made: [], detached: [] });

    // Keeping 12 months besides the current one, a year and two months later May 2031 goes.
    const later = new Date(Date.UTC(2032, 6, 2));
    const { detached } = await maintainUsagePartitions(em(), later, 12);
    expect(detached).toContain("usage_records_y2031m05");
    expect(detached).not.toContain("usage_records_y2031m07");
    expect(await partitions()).not.toContain("usage_records_y2031m05");
    expect(await partitions()).toContain("usage_records_y2031m07");
    expect(await recordsOf(early.requestId)).toEqual([]);
    // Its records stay in their own table, for an operator to archive.
    const [kept] = await t.query<{ n: string }>(`select count(*)::text as n from usage_records_y2031m05`);
    expect(kept!.n).toBe("1");
    // And the books still reconcile: the detached months' records still prove their entries,
    // rollups and key spend (every month of this test's requests is detached by now).
    expect(await reconcile((sql) => t.query(sql))).toEqual([]);
  });
});
