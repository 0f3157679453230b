import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admitOnLease, ledgerInvariants, startTestBilling, type TestBilling } from "./billing-harness.ts";

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

describe("starting credit", () => {
  it("is granted once when a wallet opens", async () => {
    const accountId = randomUUID();
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n);
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n);
    const grants = await t.query(`select * from journal_entries where kind = 'grant' and reference = $1`, [accountId]);
    expect(grants).toHaveLength(1);
  });

  it("is granted exactly once under 20 concurrent first calls of every kind", async () => {
    const accountId = randomUUID();
    const calls = Array.from({ length: 20 }, (_, i) => {
      if (i % 3 === 0) return t.client.getBalance({ accountId }).then((r) => r.creditBalanceMicros);
      if (i % 3 === 1) return t.client.getUsageSummary({ accountId, tier: "free" }).then((r) => r.creditBalanceMicros);
      // A lease grant holds money, so the balance it implies is not 5.00; it just must not fail.
      return admitOnLease(t, { accountId, inputTokens: 100n, outputTokens: 10n }).then(() => undefined);
    });
    const results = await Promise.all(calls);
    for (const balance of results) if (balance !== undefined) expect(balance).toBeLessThanOrEqual(5_000_000n);

    const grants = await t.query(`select * from journal_entries where kind = 'grant' and reference = $1`, [accountId]);
    expect(grants).toHaveLength(1);
    const [wallet] = await t.query<{ posted_micros: string }>(
      `select posted_micros from wallets where account_id = $1`,
      [accountId],
    );
    expect(wallet?.posted_micros).toBe("5000000");
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("refuses a malformed account id as a bad request", async () => {
    await expect(t.client.getBalance({ accountId: "not-a-uuid" })).rejects.toMatchObject({ code: "invalid_request" });
  });
});
