import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import type { Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { settleUsageBatch } from "../src/settlement/settle-batch.ts";
import { reconcile } from "../src/wallets/reconciliation.ts";
import {
  admitOnLease,
  REQUEST_CHARGE_SQL,
  settlementOf,
  startTestBilling,
  type TestBilling,
  openTestOrm,
} from "./billing-harness.ts";

// One journal entry per settled batch, its legs summed from the records the batch inserted: a
// request reaching billing again, by whichever path, adds nothing to any leg. Batches are also
// settled directly here (as the consumer would settle a redelivered one) on billing's database.
let t: TestBilling;
let orm: Orm;
const log = createLogger("batch-entry-test", "silent");
beforeAll(async () => {
  t = await startTestBilling({ STARTING_CREDIT_USD: "0.01" }); // 10,000 micro-USD per account
  orm = await openTestOrm(t, log);
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
});

const settle = (events: UsageCompleted[]) =>
  orm.em.fork().transactional((em) => settleUsageBatch(em, events, log, new Date()));
const books = () => reconcile((sql) => t.query(sql));
const tokens = { inputTokens: 100n, outputTokens: 150n }; // 275 micro-USD at the harness's prices

async function posted(accountId: string): Promise<bigint> {
  const [row] = await t.query<{ v: string }>(`select posted_micros::text as v from wallets where account_id = $1`, [
    accountId,
  ]);
  return BigInt(row!.v);
}

describe("one journal entry per settled batch", () => {
  it("charges an event sent three times (its batch redelivered, regrouped through RecordUsage, again later) once", async () => {
    const accountId = randomUUID();
    const event = await admitOnLease(t, { accountId, ...tokens });
    const companion = await admitOnLease(t, {
      accountId: randomUUID(),
      ...tokens,
      provider: "hoster",
      hosterId: "hoster-once",
    });

    // First, JetStream's delivery of a batch of the two.
    await Promise.all([t.publishUsage(event), t.publishUsage(companion)]);
    await t.waitSettled();
    const first = await settlementOf(t, event.requestId);
    expect(first.record).toMatchObject({ cost_micros: "275", write_off_micros: "0" });

    // 1. The same batch delivered again (committed, its ack lost): nothing new.
    expect(await settle([event, companion])).toEqual(["duplicate", "duplicate"]);
    await Promise.all([
      t.publishUsage(event, `${event.requestId}-redelivered`),
      t.publishUsage(companion, `${companion.requestId}-redelivered`),
    ]);
    await t.waitSettled();
    // 2. Regrouped with another request of the account, through the edge's RecordUsage.
    const other = await admitOnLease(t, { accountId, ...tokens });
    await t.client.recordUsage({ events: [other, event] });
    // 3. Later, under a message id JetStream no longer remembers.
    await t.publishUsage(event, `${event.requestId}-after-the-dedup-window`);
    await t.waitSettled();

    expect(await t.query(`select 1 from usage_records where request_id = $1`, [event.requestId])).toHaveLength(1);
    // The record still names the entry that first settled it, whose customer leg is the sum of
    // its records: the request is charged there and nowhere else.
    expect((await settlementOf(t, event.requestId)).record.entry_id).toBe(first.record.entry_id);
    expect((await t.query<{ v: string }>(REQUEST_CHARGE_SQL, [event.requestId]))[0]!.v).toBe("275");
    const debits = await t.query<{ entry_id: string; amount_micros: string }>(
      `select entry_id, amount_micros from ledger_postings where ledger_account = $1 and amount_micros < 0
       order by created_at`,
      [`customer:${accountId}`],
    );
    // Two requests, two charges of 275: the event's and the other one's (its own batch).
    expect(debits.map((d) => d.amount_micros)).toEqual(["-275", "-275"]);
    expect(debits[0]!.entry_id).toBe(first.record.entry_id);
    expect(await posted(accountId)).toBe(10_000n - 2n * 275n);
    expect(await books()).toEqual([]);
  });

  it("folds a write-off into its batch's entry, which balances with the other accounts' legs", async () => {
    const accountId = randomUUID();
    const edgeId = `edge_${randomUUID()}`;
    const grant = async (edge: string, creditMicros: bigint) =>
      (
        await t.client.grantLease({
          edgeId: edge,
          incarnation: 0n,
          bootId: "",
          sequence: 1n,
          accountId,
          tier: "free",
          minCreditMicros: 0n,
          request: { creditMicros, requests: 1n, tokens: 0n, subscriptionId: "", keyId: "" },
        })
      ).lease!;
    const dead = await grant(edgeId, 8_000n);
    // Its edge restarts with the request running: the new incarnation releases the lease's hold.
    await t.client.heartbeat({
      edgeId,
      incarnation: 0n,
      bootId: randomUUID(),
      sequence: 1n,
      leases: [],
      unansweredGrantAccounts: [],
    });
    // Another edge holds all but 100 of the balance.
    await grant(`edge_${randomUUID()}`, 9_900n);
    // Costs ceil(2,000 × 1.5) = 3,000: 100 paid, 2,900 written off.
    const late = UsageCompleted.fromPartial({
      requestId: newRequestId(),
      accountId,
      keyId: "key_1",
      modelId: "demo-small",
      provider: "local",
      leaseId: dead.leaseId,
      inputPricePer1mMicros: 500_000n,
      outputPricePer1mMicros: 1_500_000n,
      worstCaseMicros: 8_000n,
      inputTokens: 0n,
      outputTokens: 2_000n,
      success: true,
      latencyMs: 10n,
    });
    const payer = randomUUID();
    const hosted = await admitOnLease(t, {
      accountId: payer,
      ...tokens,
      provider: "hoster",
      hosterId: "hoster-wo",
      inputPricePer1mMicros: 1_000_000n,
      outputPricePer1mMicros: 2_000_000n,
    });

    expect(await settle([late, hosted])).toEqual(["late_settled", "settled"]);
    const { record, legs, recordsInEntry } = await settlementOf(t, late.requestId);
    expect(record).toMatchObject({ cost_micros: "3000", platform_fee_micros: "3000", write_off_micros: "2900" });
    expect((await settlementOf(t, hosted.requestId)).record).toMatchObject({
      cost_micros: "400",
      platform_fee_micros: "80",
      hoster_earned_micros: "320",
      entry_id: record.entry_id,
    });
    expect(recordsInEntry).toBe(2);
    expect(legs).toEqual({
      [`customer:${accountId}`]: "-100",
      [`customer:${payer}`]: "-400",
      "hoster:hoster-wo": "320",
      "platform:revenue": "3080",
      "platform:write_offs": "-2900",
    });
    expect(Object.values(legs).reduce((sum, amount) => sum + BigInt(amount), 0n)).toBe(0n);
    expect(await posted(accountId)).toBe(9_900n);
    expect(await books()).toEqual([]);
  });

  it("posts no entry for a batch that moved no money", async () => {
    const accountId = randomUUID();
    // An answer that failed before its first token costs nothing.
    const failed = await admitOnLease(t, { accountId, inputTokens: 100n, outputTokens: 0n, worstCaseMicros: 350n });
    const before = await t.query(`select count(*)::int as n from journal_entries`);
    expect(await settle([{ ...failed, success: false, errorCode: "upstream_error" }])).toEqual(["settled"]);
    const { record } = await settlementOf(t, failed.requestId);
    expect(record).toMatchObject({ cost_micros: "0", entry_id: null });
    expect(await t.query(`select count(*)::int as n from journal_entries`)).toEqual(before);
    expect(await books()).toEqual([]);
  });
});
