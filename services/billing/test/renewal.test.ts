import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import type { TestAccounts } from "../../accounts/test/accounts-harness.ts";
import { startBilling } from "../src/server.ts";
import { authorizeRequest, ledgerInvariants, type TestBilling } from "./billing-harness.ts";
import type { RegistryDouble } from "./registry-double.ts";
import { startBillingWithPeers, type BillingWithPeers } from "./saga-peers.ts";
import { refusal } from "@mkt/testkit/refusal";

// Renewal against a real accounts service and a registry double, on billing's clock: every test
// subscribes at a time it sets, then moves the clock across period ends and runs passes itself.
let now = new Date("2027-01-31T10:00:00.000Z");
let accounts: TestAccounts;
let registry: RegistryDouble;
let t: TestBilling;
let peers: BillingWithPeers | undefined;
beforeAll(async () => {
  peers = await startBillingWithPeers(() => now);
  ({ accounts, registry, billing: t } = peers);
});
afterAll(() => peers?.close());

/** A `subscription` plan (registry requires included tokens on it) of a new hoster. */
const monthlyPlan = (monthlyPriceMicros: bigint) =>
  registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros, includedTokens: 1_000_000n });
const at = (iso: string) => (now = new Date(iso));
const renew = () => t.billing.renewSubscriptions(now);
const balance = async (accountId: string) => (await t.client.getBalance({ accountId })).creditBalanceMicros;

async function customer(topUpMicros = 0n): Promise<string> {
  const { account } = await accounts.signUp();
  const accountId = account!.accountId;
  if (topUpMicros > 0n) await t.client.addCredits({ accountId, amountMicros: topUpMicros, idempotencyKey: "seed" });
  return accountId;
}

async function subscribe(accountId: string, productId: string) {
  const { subscription } = await t.client.createSubscription({ accountId, productId, idempotencyKey: "" });
  return subscription!;
}

interface Row extends Record<string, unknown> {
  status: string;
  period_index: number;
  period_start: Date;
  period_end: Date;
  monthly_price_micros: string;
  included_tokens: string;
  rpm_limit: string;
}

async function row(subscriptionId: string): Promise<Row> {
  const [found] = await t.query<Row>(`select * from subscriptions where id = $1`, [subscriptionId]);
  return found!;
}

const period = (r: Row) => ({
  index: r.period_index,
  start: r.period_start.toISOString(),
  end: r.period_end.toISOString(),
  status: r.status,
});

/** The fee postings of one period of a subscription, by ledger account. */
async function fee(subscriptionId: string, periodIndex: number): Promise<Record<string, bigint>> {
  const rows = await t.query<{ ledger_account: string; amount_micros: string }>(
    `select p.ledger_account, p.amount_micros from journal_entries e join ledger_postings p on p.entry_id = e.id
     where e.kind = 'subscription_fee' and e.reference = $1`,
    [`${subscriptionId}:${periodIndex}`],
  );
  return Object.fromEntries(rows.map((r) => [r.ledger_account, BigInt(r.amount_micros)]));
}

async function feeCount(subscriptionId: string): Promise<number> {
  const rows = await t.query(`select 1 from journal_entries where kind = 'subscription_fee' and reference like $1`, [
    `${subscriptionId}:%`,
  ]);
  return rows.length;
}

/** An Authorize for the subscription's scoped key, as the edge sends it for a hoster model. */
async function authorizeScoped(accountId: string, subscriptionId: string, hosterId: string) {
  const req = authorizeRequest({
    accountId,
    subscriptionId,
    provider: "hoster",
    hosterId,
    modelId: "hoster-model.gguf",
    inputPricePer1mMicros: 0n,
    outputPricePer1mMicros: 0n,
    requestedMaxOutputTokens: 10n,
  });
  return { ...(await t.client.authorize(req)), requestId: req.requestId };
}

describe("renewal", () => {
  it("renews at period_end on the anchor's day (Jan 31 → Feb 28 → Mar 31), 80% to the hoster", async () => {
    at("2027-01-31T10:00:00.000Z");
    const accountId = await customer(20_000_000n);
    // 4.999999 USD: the platform's floor(20%) is 0.999999, the hoster gets 4.000000.
    const plan = monthlyPlan(4_999_999n);
    const sub = await subscribe(accountId, plan.productId);
    expect(sub.periodEnd).toBe("2027-02-28T10:00:00.000Z");
    const afterFirst = await balance(accountId);
    expect(afterFirst).toBe(25_000_000n - 4_999_999n);

    // A millisecond early: nothing to do.
    at("2027-02-28T09:59:59.999Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 1, end: "2027-02-28T10:00:00.000Z" });

    at("2027-02-28T10:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toEqual({
      index: 2,
      start: "2027-02-28T10:00:00.000Z",
      // Counted from the Jan 31 anchor, not chained from Feb 28.
      end: "2027-03-31T10:00:00.000Z",
      status: "active",
    });
    expect(await fee(sub.subscriptionId, 2)).toEqual({
      [`customer:${accountId}`]: -4_999_999n,
      "platform:revenue": 999_999n,
      [`hoster:${plan.hosterId}`]: 4_000_000n,
    });
    expect(await balance(accountId)).toBe(afterFirst - 4_999_999n);

    // Another pass at the same moment changes nothing.
    await renew();
    expect(await feeCount(sub.subscriptionId)).toBe(2);

    at("2027-03-31T10:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toEqual({
      index: 3,
      start: "2027-03-31T10:00:00.000Z",
      end: "2027-04-30T10:00:00.000Z",
      status: "active",
    });
    expect(await fee(sub.subscriptionId, 3)).toEqual(await fee(sub.subscriptionId, 2));
    expect(await balance(accountId)).toBe(afterFirst - 2n * 4_999_999n);
    // The customer's listing shows the new period.
    const { subscriptions } = await t.client.listSubscriptions({ accountId });
    expect(subscriptions[0]).toMatchObject({
      periodStart: "2027-03-31T10:00:00.000Z",
      periodEnd: "2027-04-30T10:00:00.000Z",
    });
    expect(await ledgerInvariants(t)).toMatchObject({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("charges the plan's current terms: an edit applies from the next renewal, an archived plan renews on its last terms", async () => {
    at("2027-05-10T00:00:00.000Z");
    const accountId = await customer(10_000_000n);
    const plan = registry.addProduct({
      pricingModel: "subscription",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1000n,
      rpmLimit: 10n,
    });
    const sub = await subscribe(accountId, plan.productId);
    registry.editProduct(plan.productId, { monthlyPriceMicros: 2_500_000n, includedTokens: 5000n, rpmLimit: 20n });
    // Until the renewal the subscription keeps what it bought.
    expect(await row(sub.subscriptionId)).toMatchObject({ monthly_price_micros: "1000000", included_tokens: "1000" });

    at("2027-06-10T00:00:00.000Z");
    await renew();
    expect(await row(sub.subscriptionId)).toMatchObject({
      period_index: 2,
      monthly_price_micros: "2500000",
      included_tokens: "5000",
      rpm_limit: "20",
    });
    expect(await fee(sub.subscriptionId, 2)).toMatchObject({ [`customer:${accountId}`]: -2_500_000n });

    registry.archiveProduct(plan.productId);
    at("2027-07-10T00:00:00.000Z");
    await renew();
    expect(await row(sub.subscriptionId)).toMatchObject({ period_index: 3, status: "active" });
    expect(await fee(sub.subscriptionId, 3)).toMatchObject({ [`hoster:${plan.hosterId}`]: 2_000_000n });
  });

  it("starts the included tokens afresh: a period's allowance used up (429) is back after the renewal", async () => {
    at("2027-07-20T00:00:00.000Z");
    const accountId = await customer();
    const plan = registry.addProduct({
      pricingModel: "subscription",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 100n,
    });
    const sub = await subscribe(accountId, plan.productId);
    const grant = await authorizeScoped(accountId, sub.subscriptionId, plan.hosterId);
    await t.publishUsage({
      requestId: grant.requestId,
      reservationId: grant.reservationId,
      accountId,
      provider: "hoster",
      hosterId: plan.hosterId,
      modelId: "hoster-model.gguf",
      inputTokens: 100n,
      outputTokens: 10n,
      success: true,
    });
    await t.waitSettled();
    expect((await refusal(authorizeScoped(accountId, sub.subscriptionId, plan.hosterId))).code).toBe(
      "included_tokens_exhausted",
    );

    at("2027-08-20T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 2, status: "active" });
    await authorizeScoped(accountId, sub.subscriptionId, plan.hosterId);
  });

  it("goes past due when the balance is short (402 on its key), and a top-up renews it at once", async () => {
    at("2027-08-15T08:00:00.000Z");
    const accountId = await customer();
    const plan = monthlyPlan(3_000_000n);
    const sub = await subscribe(accountId, plan.productId);
    expect(await balance(accountId)).toBe(2_000_000n);

    at("2027-09-15T08:00:05.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 1, status: "past_due" });
    expect(await feeCount(sub.subscriptionId)).toBe(1);
    expect(await balance(accountId)).toBe(2_000_000n);
    const err = await refusal(authorizeScoped(accountId, sub.subscriptionId, plan.hosterId));
    expect(err.code).toBe("subscription_past_due");
    const { subscriptions } = await t.client.listSubscriptions({ accountId });
    expect(subscriptions[0]!.status).toBe("past_due");

    // Passes keep trying; still short, still past due, nothing charged.
    at("2027-09-16T08:00:00.000Z");
    await renew();
    expect((await row(sub.subscriptionId)).status).toBe("past_due");

    // The top-up pays the renewal before it answers; its balance is what is left.
    const topUp = await t.client.addCredits({ accountId, amountMicros: 5_000_000n, idempotencyKey: "pay" });
    expect(topUp.creditBalanceMicros).toBe(4_000_000n);
    expect(period(await row(sub.subscriptionId))).toEqual({
      index: 2,
      // The period still starts at the boundary it was due on: paying late does not move the anchor.
      start: "2027-09-15T08:00:00.000Z",
      end: "2027-10-15T08:00:00.000Z",
      status: "active",
    });
    expect(await fee(sub.subscriptionId, 2)).toMatchObject({ [`hoster:${plan.hosterId}`]: 2_400_000n });
    await authorizeScoped(accountId, sub.subscriptionId, plan.hosterId);
    expect(await ledgerInvariants(t)).toMatchObject({ unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("renews a paused subscription and keeps it paused, also through past due", async () => {
    at("2027-11-01T00:00:00.000Z");
    const accountId = await customer(1_000_000n); // 6.00 USD
    const plan = monthlyPlan(2_000_000n);
    const sub = await subscribe(accountId, plan.productId);
    const paused = await t.client.pauseSubscription({ hosterId: plan.hosterId, subscriptionId: sub.subscriptionId });
    expect(paused.subscriber?.status).toBe("paused");

    at("2027-12-01T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 2, status: "paused" });
    expect(await balance(accountId)).toBe(2_000_000n);

    at("2028-01-01T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 3, status: "paused" });
    expect(await balance(accountId)).toBe(0n);

    // Short: past due, which Authorize reports first (paying is what the customer can do).
    at("2028-02-01T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 3, status: "past_due" });
    expect((await refusal(authorizeScoped(accountId, sub.subscriptionId, plan.hosterId))).code).toBe(
      "subscription_past_due",
    );
    // Paid: back to the hoster's pause, not to active.
    await t.client.addCredits({ accountId, amountMicros: 2_000_000n, idempotencyKey: "pay" });
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 4, status: "paused" });
    expect((await refusal(authorizeScoped(accountId, sub.subscriptionId, plan.hosterId))).code).toBe(
      "subscription_paused",
    );
  });

  it("does not renew a cancelled subscription", async () => {
    at("2028-03-05T00:00:00.000Z");
    const accountId = await customer();
    const plan = monthlyPlan(1_000_000n);
    const sub = await subscribe(accountId, plan.productId);
    await t.client.cancelSubscription({ accountId, subscriptionId: sub.subscriptionId });

    at("2028-04-05T00:00:00.000Z");
    await renew();
    at("2028-06-05T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 1, status: "cancelled" });
    expect(await feeCount(sub.subscriptionId)).toBe(1);
    expect(await balance(accountId)).toBe(4_000_000n);
  });

  it("charges once for a subscription several periods behind, moving to the period that holds now", async () => {
    at("2028-01-31T10:00:00.000Z");
    const accountId = await customer(10_000_000n);
    const plan = monthlyPlan(1_000_000n);
    const sub = await subscribe(accountId, plan.productId);
    const before = await balance(accountId);

    // Billing was down from February to mid-May: the missed periods are not charged.
    at("2028-05-15T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toEqual({
      index: 2,
      start: "2028-04-30T10:00:00.000Z",
      end: "2028-05-31T10:00:00.000Z",
      status: "active",
    });
    expect(await feeCount(sub.subscriptionId)).toBe(2);
    expect(await balance(accountId)).toBe(before - 1_000_000n);
  });

  it("renews free and payg plans without a charge, starting a new period", async () => {
    at("2028-07-01T00:00:00.000Z");
    const accountId = await customer();
    const free = registry.addProduct({ pricingModel: "free" });
    const payg = registry.addProduct({ pricingModel: "payg", inputPricePer1mMicros: 1n, outputPricePer1mMicros: 1n });
    const subs = [await subscribe(accountId, free.productId), await subscribe(accountId, payg.productId)];
    at("2028-08-01T00:00:00.000Z");
    await renew();
    for (const sub of subs) {
      expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 2, end: "2028-09-01T00:00:00.000Z" });
      expect(await feeCount(sub.subscriptionId)).toBe(0);
    }
    expect(await balance(accountId)).toBe(5_000_000n);
  });

  it("waits for the next pass when registry cannot say what the plan costs now", async () => {
    at("2028-09-10T00:00:00.000Z");
    const accountId = await customer();
    const plan = monthlyPlan(1_000_000n);
    const sub = await subscribe(accountId, plan.productId);
    at("2028-10-10T00:00:00.000Z");
    registry.setFailing(true);
    try {
      await renew();
    } finally {
      registry.setFailing(false);
    }
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 1, status: "active" });
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 2, status: "active" });
  });

  it("renews each subscription once when two billing replicas run their passes at the same moment", async () => {
    at("2029-01-15T12:00:00.000Z");
    const plan = monthlyPlan(1_234_567n);
    const subs = [];
    for (let i = 0; i < 20; i++) subs.push(await subscribe(await customer(), plan.productId));

    const replica = await startBilling(t.config, createLogger("billing-replica", "silent"), {
      clock: () => now,
      sweepIntervalMs: 3_600_000,
      janitorIntervalMs: 3_600_000,
      renewalIntervalMs: 3_600_000,
    });
    try {
      at("2029-02-15T12:00:00.000Z");
      const results = await Promise.all([renew(), replica.renewSubscriptions(now), renew()]);
      expect(results.reduce((sum, r) => sum + r.renewed, 0)).toBeGreaterThanOrEqual(subs.length);
    } finally {
      await replica.close();
    }
    for (const sub of subs) {
      expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 2, end: "2029-03-15T12:00:00.000Z" });
      expect(await feeCount(sub.subscriptionId)).toBe(2);
      expect(await balance(sub.accountId)).toBe(5_000_000n - 2n * 1_234_567n);
    }
    expect(await ledgerInvariants(t)).toMatchObject({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });
});

describe("pause and resume (the plan's hoster only)", () => {
  it("pauses: the next request is 403 with the exact message; resume restores it; both are idempotent", async () => {
    at("2029-04-01T00:00:00.000Z");
    const accountId = await customer();
    const plan = monthlyPlan(1_000_000n);
    const sub = await subscribe(accountId, plan.productId);
    const ids = { hosterId: plan.hosterId, subscriptionId: sub.subscriptionId };

    await authorizeScoped(accountId, sub.subscriptionId, plan.hosterId);
    for (let i = 0; i < 2; i++) {
      const { subscriber } = await t.client.pauseSubscription(ids);
      expect(subscriber).toMatchObject({ subscriptionId: sub.subscriptionId, status: "paused" });
      expect(subscriber!.emailMasked).toMatch(/^u\*\*\*@example\.com$/);
    }
    const err = await refusal(authorizeScoped(accountId, sub.subscriptionId, plan.hosterId));
    expect(err.code).toBe("subscription_paused");
    expect(err.message).toBe("Your access has been temporarily paused by the hoster.");
    expect((await t.client.listSubscriptions({ accountId })).subscriptions[0]!.status).toBe("paused");

    for (let i = 0; i < 2; i++) {
      expect((await t.client.resumeSubscription(ids)).subscriber?.status).toBe("active");
    }
    await authorizeScoped(accountId, sub.subscriptionId, plan.hosterId);
  });

  it("is not_found for another hoster, an unknown or malformed id; a cancelled one is answered unchanged", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "free" });
    const other = registry.addProduct({ pricingModel: "free" });
    const sub = await subscribe(accountId, plan.productId);
    for (const ids of [
      { hosterId: other.hosterId, subscriptionId: sub.subscriptionId },
      { hosterId: plan.hosterId, subscriptionId: randomUUID() },
      { hosterId: plan.hosterId, subscriptionId: "not-a-uuid" },
    ]) {
      expect((await refusal(t.client.pauseSubscription(ids))).code).toBe("not_found");
      expect((await refusal(t.client.resumeSubscription(ids))).code).toBe("not_found");
    }
    expect((await row(sub.subscriptionId)).status).toBe("active");

    await t.client.cancelSubscription({ accountId, subscriptionId: sub.subscriptionId });
    const { subscriber } = await t.client.pauseSubscription({
      hosterId: plan.hosterId,
      subscriptionId: sub.subscriptionId,
    });
    expect(subscriber?.status).toBe("cancelled");
  });
});
