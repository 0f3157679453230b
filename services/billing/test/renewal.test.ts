import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { startBilling } from "../src/server.ts";
import { ledgerInvariants, type TestBilling } from "./billing-harness.ts";
import type { RegistryDouble } from "./registry-double.ts";
import { startBillingWithPeers, type BillingWithPeers } from "./saga-peers.ts";
import { subscriptionDriver, type SubscriptionDbRow } from "./subscription-driver.ts";
import { refusal } from "@mkt/testkit/refusal";

// Renewal against a real accounts service and a registry double, on billing's clock: every test
// subscribes at a time it sets, then moves the clock across period ends and runs passes itself.
let now = new Date("2027-01-31T10:00:00.000Z");
let registry: RegistryDouble;
let t: TestBilling;
let peers: BillingWithPeers | undefined;
beforeAll(async () => {
  peers = await startBillingWithPeers(() => now);
  ({ registry, billing: t } = peers);
});
afterAll(() => peers?.close());

/** A `subscription` plan (registry requires included tokens on it) of a new hoster. */
const monthlyPlan = (monthlyPriceMicros: bigint) =>
  registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros, includedTokens: 1_000_000n });
const at = (iso: string) => (now = new Date(iso));
const renew = () => t.billing.renewSubscriptions(now);
const { customer, subscribe, balance, row, fee, feeCount, grantScoped, settleScoped } = subscriptionDriver(
  () => peers!,
);

const period = (r: SubscriptionDbRow) => ({
  index: r.period_index,
  start: r.period_start.toISOString(),
  end: r.period_end.toISOString(),
  status: r.status,
});

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

  it("starts the included tokens afresh: a period's allowance used up (429) is back after the renewal", async () => {
    at("2027-07-20T00:00:00.000Z");
    const accountId = await customer();
    const plan = registry.addProduct({
      pricingModel: "subscription",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 100n,
    });
    const sub = await subscribe(accountId, plan.productId);
    await settleScoped(accountId, sub.subscriptionId, plan.hosterId);
    expect((await refusal(grantScoped(accountId, sub.subscriptionId))).code).toBe("included_tokens_exhausted");

    at("2027-08-20T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 2, status: "active" });
    await grantScoped(accountId, sub.subscriptionId);
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
    const err = await refusal(grantScoped(accountId, sub.subscriptionId));
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
    await grantScoped(accountId, sub.subscriptionId);
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

    // Short: past due, which a grant reports first (paying is what the customer can do).
    at("2028-02-01T00:00:00.000Z");
    await renew();
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 3, status: "past_due" });
    expect((await refusal(grantScoped(accountId, sub.subscriptionId))).code).toBe("subscription_past_due");
    // Paid: back to the hoster's pause, not to active.
    await t.client.addCredits({ accountId, amountMicros: 2_000_000n, idempotencyKey: "pay" });
    expect(period(await row(sub.subscriptionId))).toMatchObject({ index: 4, status: "paused" });
    expect((await refusal(grantScoped(accountId, sub.subscriptionId))).code).toBe("subscription_paused");
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
      counterPruneIntervalMs: 3_600_000,
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

    await grantScoped(accountId, sub.subscriptionId);
    for (let i = 0; i < 2; i++) {
      const { subscriber } = await t.client.pauseSubscription(ids);
      expect(subscriber).toMatchObject({ subscriptionId: sub.subscriptionId, status: "paused" });
      expect(subscriber!.emailMasked).toMatch(/^u\*\*\*@example\.com$/);
    }
    const err = await refusal(grantScoped(accountId, sub.subscriptionId));
    expect(err.code).toBe("subscription_paused");
    expect(err.message).toBe("Your access has been temporarily paused by the hoster.");
    expect((await t.client.listSubscriptions({ accountId })).subscriptions[0]!.status).toBe("paused");

    for (let i = 0; i < 2; i++) {
      expect((await t.client.resumeSubscription(ids)).subscriber?.status).toBe("active");
    }
    await grantScoped(accountId, sub.subscriptionId);
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
