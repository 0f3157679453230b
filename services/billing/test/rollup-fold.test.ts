import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admitOnLease, ledgerInvariants, startTestBilling, waitFor, type TestBilling } from "./billing-harness.ts";

// The fold worker would run every minute here: the test folds when it chooses (foldRollups), so
// what settlement alone wrote can be seen before.
let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling({ ROLLUP_FOLD_INTERVAL_MS: "60000" });
});
afterAll(() => t?.close());

/** Publishes the request's usage and waits for its record (its batch committed), folding nothing. */
async function settled(usage: Parameters<typeof admitOnLease>[1]) {
  const event = await admitOnLease(t, { inputTokens: 1000n, outputTokens: 1000n, ...usage });
  await t.publishUsage(event);
  await waitFor(
    async () => (await t.query(`select 1 from usage_records where request_id = $1`, [event.requestId])).length,
    (n) => n === 1,
  );
  return event;
}

const hourly = async (accountId: string) =>
  (
    await t.query<{ requests: string; cost: string }>(
      `select requests::text, cost_micros::text as cost from usage_hourly where account_id = $1`,
      [accountId],
    )
  ).map((r) => [Number(r.requests), Number(r.cost)]);

const spent = async (keyId: string) =>
  Number(
    (
      await t.query<{ v: string }>(
        `select coalesce(sum(spent_micros), 0)::text as v from key_daily_spend where key_id = $1`,
        [keyId],
      )
    )[0]!.v,
  );

describe("rollups folded off the settlement transaction", () => {
  it("queue each batch's deltas, which one fold adds to the rollups, and the books reconcile either way", async () => {
    const accountId = randomUUID();
    await settled({ accountId });
    await settled({ accountId });
    // Settled and charged, not in the report yet: its deltas wait in the queue.
    expect(await hourly(accountId)).toEqual([]);
    expect(
      Number((await t.query<{ n: string }>(`select count(*) as n from usage_rollup_queue`))[0]!.n),
    ).toBeGreaterThan(0);
    await ledgerInvariants(t);

    await t.billing.foldRollups();
    // 2,000 = 1000 × 0.50 + 1000 × 1.50 per 1M, each; both batches in one rollup row.
    expect(await hourly(accountId)).toEqual([[2, 4000]]);
    expect((await t.query(`select 1 from usage_rollup_queue`)).length).toBe(0);
    await ledgerInvariants(t);
  });

  it("write a limited key's spend in the settlement transaction and fold an unlimited one's", async () => {
    const accountId = randomUUID();
    const limited = randomUUID();
    const unlimited = randomUUID();
    await t.client.setKeyLimit({ accountId, keyId: limited, limitMicros: 1_000_000n, limitReset: "" });
    await settled({ accountId, keyId: limited });
    await settled({ accountId, keyId: unlimited });
    // The limit's next grant reads its spend: there at once. The other's waits for the fold.
    expect(await spent(limited)).toBe(2000);
    expect(await spent(unlimited)).toBe(0);
    await t.billing.foldRollups();
    expect(await spent(limited)).toBe(2000);
    expect(await spent(unlimited)).toBe(2000);
  });

  it("fold a key's queued spend before a limit set on it counts it", async () => {
    const accountId = randomUUID();
    const keyId = randomUUID();
    await settled({ accountId, keyId });
    expect(await spent(keyId)).toBe(0);
    const { limit } = await t.client.setKeyLimit({ accountId, keyId, limitMicros: 3_000n, limitReset: "" });
    // What the key spent before it had a limit counts against it: 1,000 of 3,000 left.
    expect(limit!.spentMicros).toBe(2000n);
    expect(await spent(keyId)).toBe(2000);
    const refused = await admitOnLease(t, { accountId, keyId, inputTokens: 1000n, outputTokens: 1000n }).catch(
      (err: { code?: string }) => err.code,
    );
    expect(refused).toBe("key_limit_exceeded");
  });
});
