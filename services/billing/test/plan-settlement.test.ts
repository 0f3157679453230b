import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { ProductTerms } from "@mkt/proto/registry/v1/registry";
import { startTestAccounts, type TestAccounts } from "../../accounts/test/accounts-harness.ts";
import { settleUsageBatch } from "../src/settlement/settle-batch.ts";
import {
  admitOnLease,
  ledgerInvariants,
  requestLegs,
  settleOnLease,
  startTestBilling,
  type LeaseUsage,
  type TestBilling,
  openTestOrm,
} from "./billing-harness.ts";
import { startRegistryDouble, type RegistryDouble } from "./registry-double.ts";
import { refusal } from "@mkt/testkit/refusal";

// A subscription's requests are priced by its plan's terms snapshot (the lease budget's copy of
// it), never by the route, when their usage settles. Real accounts (scoped keys) and a registry
// double serving the plans; billing's clock is the test's, 30 s into a UTC minute. The plan's
// limits (rpm, tpm, slots, included tokens) as grants enforce them: lease-budgets.test.ts.
const log = createLogger("plan-limits-test", "silent");
const now = new Date("2026-03-10T10:00:30.000Z");
let accounts: TestAccounts;
let registry: RegistryDouble;
let t: TestBilling;
let orm: Orm;
beforeAll(async () => {
  accounts = await startTestAccounts();
  registry = await startRegistryDouble(log);
  t = await startTestBilling(
    { ACCOUNTS_ADDR: `127.0.0.1:${accounts.accounts.port}`, REGISTRY_ADDR: `127.0.0.1:${registry.port}` },
    { clock: () => now },
  );
  orm = await openTestOrm(t, log);
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
  await registry?.close();
  await accounts?.close();
});

interface Subscriber {
  accountId: string;
  subscriptionId: string;
  hosterId: string;
}

/** A fresh customer subscribed to `plan` (a new plan from `terms` when given terms). */
async function subscriber(plan: { productId: string; hosterId: string }): Promise<Subscriber> {
  const { account } = await accounts.signUp();
  const accountId = account!.accountId;
  const { subscription } = await t.client.createSubscription({
    accountId,
    productId: plan.productId,
    idempotencyKey: "",
  });
  return { accountId, subscriptionId: subscription!.subscriptionId, hosterId: plan.hosterId };
}

const planOf = (terms: Partial<ProductTerms> & Pick<ProductTerms, "pricingModel">) => registry.addProduct(terms);
const subscribed = async (terms: Partial<ProductTerms> & Pick<ProductTerms, "pricingModel">) =>
  subscriber(planOf(terms));

/**
 * A scoped key's request admitted on the subscription's budget and settled with the given token
 * counts: registry's hoster route, priced 0 (the terms decide); `worst` is what the edge admitted
 * it with (tokens: prompt + output cap; micro-USD: its worst cost under the terms).
 */
function scoped(s: Subscriber, fields: Partial<LeaseUsage> = {}): LeaseUsage {
  return {
    accountId: s.accountId,
    subscriptionId: s.subscriptionId,
    provider: "hoster",
    hosterId: s.hosterId,
    modelId: "llama-3-8b.gguf",
    inputPricePer1mMicros: 0n,
    outputPricePer1mMicros: 0n,
    worstCaseMicros: 0n,
    latencyMs: 50n,
    ...fields,
  };
}

async function served(
  s: Subscriber,
  tokens: { input: bigint; output: bigint },
  worst: { tokens?: bigint; micros?: bigint } = {},
) {
  return settleOnLease(
    t,
    scoped(s, {
      inputTokens: tokens.input,
      outputTokens: tokens.output,
      worstCaseTokens: worst.tokens,
      worstCaseMicros: worst.micros ?? 0n,
    }),
  );
}

/**
 * What one request moved, by ledger account ({} when it moved no money): its record's legs, which
 * its batch's journal entry sums (requestLegs checks the entry against its records).
 */
const usagePostings = (requestId: string) => requestLegs(t, requestId);

const balance = async (accountId: string) => (await t.client.getBalance({ accountId })).creditBalanceMicros;
const periodUsage = async (subscriptionId: string) =>
  t.query(`select period_index, used_tokens, overage_tokens from subscription_usage where subscription_id = $1`, [
    subscriptionId,
  ]);

describe("pricing from the terms snapshot", () => {
  it("payg: the plan's per-1M prices, split 20 / 80 between platform and hoster", async () => {
    const s = await subscribed({
      pricingModel: "payg",
      inputPricePer1mMicros: 2_500_000n,
      outputPricePer1mMicros: 9_999_999n,
    });
    // Worst case: ceil((1234 × 2.5 + 1000 × 9.999999) / 1M USD) = ceil(13084.999) micro-USD.
    const { requestId } = await served(s, { input: 1_234n, output: 567n }, { tokens: 2_234n, micros: 13_085n });
    // Charge: ceil((1234 × 2,500,000 + 567 × 9,999,999) / 1M) = ceil(8754.999433) = 8755.
    expect(await usagePostings(requestId)).toEqual({
      [`customer:${s.accountId}`]: -8_755n,
      "platform:revenue": 1_751n, // floor(8755 × 20 / 100)
      [`hoster:${s.hosterId}`]: 7_004n,
    });
    expect(await balance(s.accountId)).toBe(5_000_000n - 8_755n);
    const [record] = await t.query(
      `select provider, cost_micros, platform_fee_micros, hoster_earned_micros from usage_records where request_id = $1`,
      [requestId],
    );
    expect(record).toEqual({
      provider: "hoster",
      cost_micros: "8755",
      platform_fee_micros: "1751",
      hoster_earned_micros: "7004",
    });
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1801", overage_tokens: "0" },
    ]);
  });

  it("ignores prices on the route: a scoped request is priced by its subscription only", async () => {
    const s = await subscribed({ pricingModel: "free" });
    const { requestId } = await settleOnLease(
      t,
      scoped(s, {
        inputPricePer1mMicros: 9_000_000n,
        outputPricePer1mMicros: 9_000_000n,
        worstCaseMicros: 100_000n,
        inputTokens: 100n,
        outputTokens: 4_000n,
      }),
    );
    expect(await usagePostings(requestId)).toEqual({});
    expect(await balance(s.accountId)).toBe(5_000_000n);
  });

  it("free: nothing is held or charged, whatever the balance", async () => {
    const s = await subscribed({ pricingModel: "free" });
    await balance(s.accountId); // opens the wallet, which is then emptied (and restored below)
    await t.query(`update wallets set posted_micros = 0 where account_id = $1`, [s.accountId]);
    const { requestId } = await served(s, { input: 100n, output: 200n });
    const [record] = await t.query(`select cost_micros from usage_records where request_id = $1`, [requestId]);
    expect(record).toEqual({ cost_micros: "0" });
    const [wallet] = await t.query(`select held_micros from wallets where account_id = $1`, [s.accountId]);
    expect(wallet).toEqual({ held_micros: "0" });
    await t.query(
      `update wallets w set posted_micros = (select coalesce(sum(amount_micros), 0) from ledger_postings
         where ledger_account = 'customer:' || w.account_id) where account_id = $1`,
      [s.accountId],
    );
  });

  it("subscription: free within the included tokens, then 429 included_tokens_exhausted until the next period", async () => {
    const s = await subscribed({
      pricingModel: "subscription",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
    });
    const afterFee = await balance(s.accountId);
    await served(s, { input: 400n, output: 200n });
    // 600 of 1,000 used: the next request is admitted, and its real tokens all count (1,100).
    await served(s, { input: 300n, output: 200n }, { tokens: 800n });
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1100", overage_tokens: "0" },
    ]);

    const err = await refusal(admitOnLease(t, scoped(s, { inputTokens: 100n, outputTokens: 100n })));
    expect(err).toMatchObject({ code: "included_tokens_exhausted", httpStatus: 429 });
    expect(err.message).toContain("1000 included tokens");
    const [row] = await t.query<{ period_end: Date }>(`select period_end from subscriptions where id = $1`, [
      s.subscriptionId,
    ]);
    expect(err.headers["retry-after"]).toBe(String(Math.ceil((row!.period_end.getTime() - now.getTime()) / 1000)));
    // Nothing was charged per request, and the refusal counted nowhere.
    expect(await balance(s.accountId)).toBe(afterFee);
    const [counter] = await t.query(`select requests from subscription_rate_counters where subscription_id = $1`, [
      s.subscriptionId,
    ]);
    expect(counter).toEqual({ requests: "2" });

    // A renewal moves the subscription to its next period: the allowance is whole again.
    await t.query(`update subscriptions set period_index = period_index + 1 where id = $1`, [s.subscriptionId]);
    await served(s, { input: 50n, output: 50n });
    expect(await periodUsage(s.subscriptionId)).toEqual(
      expect.arrayContaining([
        { period_index: 1, used_tokens: "1100", overage_tokens: "0" },
        { period_index: 2, used_tokens: "100", overage_tokens: "0" },
      ]),
    );
  });

  it("subscription_overage: free within the allowance, then the overage price for the part beyond it only", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 3_333_333n,
    });
    const afterFee = await balance(s.accountId);

    // 500 of the allowance: nothing charged.
    const first = await served(s, { input: 300n, output: 200n });
    expect(await usagePostings(first.requestId)).toEqual({});

    // Worst case 700 with 500 left: 200 tokens admitted at the overage price, ceil(666.67) = 667.
    // It uses 650: 150 beyond the allowance, ceil(150 × 3.333333) = 500 micro-USD.
    const crossing = await served(s, { input: 300n, output: 350n }, { tokens: 700n, micros: 667n });
    expect(await usagePostings(crossing.requestId)).toEqual({
      [`customer:${s.accountId}`]: -500n,
      "platform:revenue": 100n,
      [`hoster:${s.hosterId}`]: 400n,
    });

    // Beyond the allowance every token, input and output alike: 200 × 3.333333 → 667.
    const beyond = await served(s, { input: 100n, output: 100n }, { micros: 667n });
    expect(await usagePostings(beyond.requestId)).toEqual({
      [`customer:${s.accountId}`]: -667n,
      "platform:revenue": 133n,
      [`hoster:${s.hosterId}`]: 534n,
    });

    expect(await balance(s.accountId)).toBe(afterFee - 500n - 667n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1350", overage_tokens: "350" },
    ]);
    expect(await ledgerInvariants(t)).toMatchObject({ unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("subscription_overage: each request pays for the split it was admitted with, in whatever order it settles", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 2_000_000n, // 2 micro-USD a token
    });
    const customerLeg = async (requestId: string) => (await usagePostings(requestId))[`customer:${s.accountId}`] ?? 0n;
    // Two requests in flight together: the first takes all 1,000 included tokens for its worst
    // case of 1,200 (and holds the overage price for the other 200); the second, admitted next,
    // finds none left and holds the overage price for all of its 300.
    const first = await admitOnLease(
      t,
      scoped(s, { inputTokens: 50n, outputTokens: 50n, worstCaseTokens: 1_200n, worstCaseMicros: 400n }),
    );
    const second = await admitOnLease(
      t,
      scoped(s, { inputTokens: 100n, outputTokens: 200n, worstCaseTokens: 300n, worstCaseMicros: 600n }),
    );
    expect([first.includedTokens, second.includedTokens]).toEqual([1_000n, 0n]);
    // The second settles first and pays for all its tokens (what its answer's usage.cost said),
    // though the period's use is still within the allowance then; the first pays nothing.
    await t.publishUsage(second);
    await t.waitSettled();
    await t.publishUsage(first);
    await t.waitSettled();
    expect(await customerLeg(second.requestId)).toBe(-600n);
    expect(await customerLeg(first.requestId)).toBe(0n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "400", overage_tokens: "300" },
    ]);
    // Only the first's 100 tokens used included ones: the 900 it took and did not use are the
    // period's again, and the next request's worst case fits in them.
    const third = await settleOnLease(
      t,
      scoped(s, { inputTokens: 300n, outputTokens: 600n, worstCaseTokens: 900n, worstCaseMicros: 0n }),
    );
    expect(third.includedTokens).toBe(900n);
    expect(await customerLeg(third.requestId)).toBe(0n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1300", overage_tokens: "300" },
    ]);
    expect(await ledgerInvariants(t)).toMatchObject({ unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("counts several requests of one period settled in one batch in order, and a replay changes nothing", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 1_000_000n,
    });
    const events: UsageCompleted[] = [];
    for (let i = 0; i < 3; i++) {
      events.push(
        await admitOnLease(
          t,
          scoped(s, { inputTokens: 100n, outputTokens: 300n, worstCaseTokens: 600n, worstCaseMicros: 1_000n }),
        ),
      );
    }
    const settle = () => orm.em.fork().transactional((em) => settleUsageBatch(em, events, log, now));
    expect(await settle()).toEqual(["settled", "settled", "settled"]);
    expect(await settle()).toEqual(["duplicate", "duplicate", "duplicate"]);
    // Admitted one after the other, the first two took 600 and 400 included tokens for their
    // worst cases, the third none: it pays for all of its 400 tokens, 1 micro-USD each.
    expect(events.map((e) => e.includedTokens)).toEqual([600n, 400n, 0n]);
    const costs = await t.query(
      `select cost_micros from usage_records where request_id = any($1) order by cost_micros`,
      [events.map((e) => e.requestId)],
    );
    expect(costs).toEqual([{ cost_micros: "0" }, { cost_micros: "0" }, { cost_micros: "400" }]);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1200", overage_tokens: "400" },
    ]);
  });
});
