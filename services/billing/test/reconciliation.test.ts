import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reconcile } from "../src/wallets/reconciliation.ts";
import { HOURLY } from "../src/usage/rollup-queue.ts";

/** A usage_hourly row's columns in the order of the queue's delta type. */
const HOURLY_COLUMNS = [...HOURLY.keys.map(([name]) => name), ...HOURLY.sums].join(", ");
import { settleOnLease, startTestBilling, type TestBilling } from "./billing-harness.ts";

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

const books = () => reconcile((sql) => t.query(sql));

/**
 * Runs `tamper` in a transaction, reconciles inside it and rolls it back: what the reconciliation
 * reports about one broken figure, leaving the books as they were for the next test.
 */
async function reconcileTampered(tamper: string, params: unknown[]) {
  await t.db.query("begin");
  try {
    await t.db.query(tamper, params);
    return await books();
  } finally {
    await t.db.query("rollback");
  }
}

describe("reconciliation", () => {
  const accountId = randomUUID();
  let hosted = "";
  let local = "";

  beforeAll(async () => {
    const usage = { accountId, inputTokens: 1000n, outputTokens: 500n, latencyMs: 10n };
    hosted = (
      await settleOnLease(t, {
        ...usage,
        provider: "hoster",
        hosterId: "hoster-1",
        inputPricePer1mMicros: 1_000_000n,
        outputPricePer1mMicros: 2_000_001n,
      })
    ).requestId;
    local = (await settleOnLease(t, usage)).requestId;
  });

  it("finds nothing when the records, the ledger, the wallets and the leases agree", async () => {
    const [record] = await t.query(
      `select cost_micros, platform_fee_micros, hoster_earned_micros from usage_records where request_id = $1`,
      [hosted],
    );
    // 2,001 = ceil(1000 × 1 + 500 × 2.000001): the fee is floor(2,001 × 20 / 100) = 400, not 400.2 rounded up.
    expect(record).toEqual({ cost_micros: "2001", platform_fee_micros: "400", hoster_earned_micros: "1601" });
    expect(await books()).toEqual([]);
  });

  it("finds a record whose fee and earning are not its cost's split", async () => {
    const found = await reconcileTampered(
      `update usage_records set platform_fee_micros = platform_fee_micros + 1, hoster_earned_micros = hoster_earned_micros - 1
       where request_id = $1`,
      [hosted],
    );
    expect(found).toContainEqual({ check: "record_split", subject: hosted, expected: "2001", actual: "401 + 1600" });
  });

  it("finds a local model's record that gives a hoster a share", async () => {
    const found = await reconcileTampered(
      `update usage_records set platform_fee_micros = 0, hoster_earned_micros = cost_micros where request_id = $1`,
      [local],
    );
    expect(found.map((d) => [d.check, d.subject])).toContainEqual(["record_split", local]);
  });

  it("finds a charge whose record no longer agrees with what the ledger posted", async () => {
    const found = await reconcileTampered(
      `update usage_records set cost_micros = cost_micros + 5, platform_fee_micros = platform_fee_micros + 5
       where request_id = $1`,
      [local],
    );
    expect(found.filter((d) => d.check === "usage_leg").map((d) => d.subject.split(" ")[1])).toEqual(
      expect.arrayContaining([`customer:${accountId}`, "platform:revenue"]),
    );
  });

  it("finds a wallet that differs from its postings, and an entry that does not balance", async () => {
    const wallet = await reconcileTampered(
      `update wallets set posted_micros = posted_micros - 1 where account_id = $1`,
      [accountId],
    );
    expect(wallet.map((d) => d.check)).toEqual(["wallet_postings"]);
    const posting = await reconcileTampered(
      `update ledger_postings set amount_micros = amount_micros + 1
       where ledger_account = 'platform:revenue' and entry_id = (select entry_id from ledger_postings
         where ledger_account = 'platform:revenue' limit 1)`,
      [],
    );
    expect(posting.map((d) => d.check)).toContain("unbalanced_entry");
  });

  it("finds a wallet holding credit its leases do not hold", async () => {
    const found = await reconcileTampered(`update wallets set held_micros = held_micros + 7 where account_id = $1`, [
      accountId,
    ]);
    expect(found).toEqual([{ check: "wallet_holds", subject: accountId, expected: "0", actual: "7" }]);
  });

  it("finds a key whose spend is not what its records charged, folded or still queued", async () => {
    const keyId = randomUUID();
    await settleOnLease(t, { accountId, keyId, inputTokens: 2000n, outputTokens: 100n, latencyMs: 10n });
    await t.billing.foldRollups();
    const [spent] = await t.query<{ v: string }>(
      `select sum(spent_micros)::text as v from key_daily_spend where key_id = $1`,
      [keyId],
    );
    expect(spent!.v).toBe("1150"); // 2,000 × 0.5 + 100 × 1.5 micro-USD
    expect(await books()).toEqual([]);
    const more = await reconcileTampered(
      `update key_daily_spend set spent_micros = spent_micros + 3 where key_id = $1`,
      [keyId],
    );
    expect(more).toEqual([{ check: "key_spend", subject: keyId, expected: "1150", actual: "1153" }]);
    // Its spend moved back to the queue (settled, not folded yet) still reconciles.
    const queued = await reconcileTampered(
      `with moved as (delete from key_daily_spend where key_id = $1 returning key_id, day, spent_micros)
       insert into usage_rollup_queue (key_spend) select array_agg(row(key_id, day, spent_micros)::key_spend_delta) from moved`,
      [keyId],
    );
    expect(queued).toEqual([]);
  });

  it("finds a rollup row that is not the GROUP BY over its records, folded or still queued", async () => {
    const hourly = await reconcileTampered(
      `update usage_hourly set cost_micros = cost_micros + 1 where account_id = $1 and provider = 'local'`,
      [accountId],
    );
    expect(hourly.map((d) => [d.check, d.subject.split(" ")[0]])).toEqual([["hourly_rollup", accountId]]);
    const hoster = await reconcileTampered(`delete from hoster_usage_daily where hoster_id = 'hoster-1'`, []);
    expect(hoster.map((d) => d.check)).toEqual(["hoster_rollup"]);
    // Deltas settled and not folded yet count with their rollup: moved back to the queue, the
    // account's hourly rows still reconcile, and a queued delta too many does not.
    const queued = await reconcileTampered(
      `with moved as (delete from usage_hourly where account_id = $1 returning *)
       insert into usage_rollup_queue (hourly) select array_agg(row(${HOURLY_COLUMNS})::usage_hourly_delta) from moved`,
      [accountId],
    );
    expect(queued).toEqual([]);
    const twice = await reconcileTampered(
      `insert into usage_rollup_queue (hourly)
       select array_agg(row(${HOURLY_COLUMNS})::usage_hourly_delta) from usage_hourly where account_id = $1`,
      [accountId],
    );
    expect(twice.map((d) => d.check)).toEqual(["hourly_rollup", "hourly_rollup"]);
  });
});
