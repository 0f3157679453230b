import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProductTerms } from "@mkt/proto/registry/v1/registry";
import { refusal } from "@mkt/testkit/refusal";
import { ledgerInvariants, type TestBilling } from "./billing-harness.ts";
import type { RegistryDouble } from "./registry-double.ts";
import { startBillingWithPeers, type BillingWithPeers } from "./saga-peers.ts";
import { subscriptionDriver } from "./subscription-driver.ts";

// A hoster edits a plan between a subscriber's renewals
// (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md): each term renews on whichever of the
// subscriber's snapshot and the plan favours the subscriber. Real accounts, a registry double
// serving the plans as edited, and renewals driven on billing's clock.
let now = new Date("2030-01-10T00:00:00.000Z");
let registry: RegistryDouble;
let t: TestBilling;
let peers: BillingWithPeers | undefined;
beforeAll(async () => {
  peers = await startBillingWithPeers(() => now);
  ({ registry, billing: t } = peers);
});
afterAll(() => peers?.close());

const USD = 1_000_000n;
const d = subscriptionDriver(() => peers!);
const at = (iso: string) => (now = new Date(iso));

/** Moves the clock to the subscription's period_end, runs a renewal pass, and reads the row back. */
async function renewAtPeriodEnd(subscriptionId: string) {
  now = (await d.row(subscriptionId)).period_end;
  await t.billing.renewSubscriptions(now);
  return d.row(subscriptionId);
}

const plan = (terms: Partial<ProductTerms> & Pick<ProductTerms, "pricingModel">) => registry.addProduct(terms);
const monthly = (monthlyPriceMicros: bigint, terms: Partial<ProductTerms> = {}) =>
  plan({ pricingModel: "subscription", monthlyPriceMicros, includedTokens: 1_000_000n, ...terms });

describe("a renewal after the hoster edited the plan", () => {
  it("keeps the price the subscriber bought: a 1 USD plan edited to 10,000 USD renews at 1 USD, not past due", async () => {
    at("2030-01-10T00:00:00.000Z");
    const accountId = await d.customer(); // 5 USD
    const pro = monthly(1n * USD);
    const sub = await d.subscribe(accountId, pro.productId);
    registry.editProduct(pro.productId, { monthlyPriceMicros: 10_000n * USD });

    const renewed = await renewAtPeriodEnd(sub.subscriptionId);
    expect(renewed).toMatchObject({ status: "active", period_index: 2, monthly_price_micros: "1000000" });
    expect(await d.fee(sub.subscriptionId, 2)).toEqual({
      [`customer:${accountId}`]: -1n * USD,
      "platform:revenue": 200_000n,
      [`hoster:${pro.hosterId}`]: 800_000n,
    });
    expect(await d.balance(accountId)).toBe(3n * USD);

    // And at every renewal after: the kept price is the snapshot now.
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({ status: "active", period_index: 3 });
    expect(await d.fee(sub.subscriptionId, 3)).toMatchObject({ [`customer:${accountId}`]: -1n * USD });
    const { subscriptions } = await t.client.listSubscriptions({ accountId });
    expect(subscriptions[0]!.terms).toMatchObject({ monthlyPriceMicros: 1n * USD });

    // A new subscriber is offered the plan as it is now.
    const newcomer = await d.customer();
    const err = await refusal(d.subscribe(newcomer, pro.productId));
    expect(err.code).toBe("insufficient_credits");
    expect(await ledgerInvariants(t)).toMatchObject({ unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("a past-due subscription paid after the price went up pays its own price", async () => {
    at("2030-02-10T00:00:00.000Z");
    const accountId = await d.customer();
    const pro = monthly(3n * USD);
    const sub = await d.subscribe(accountId, pro.productId);
    expect(await d.balance(accountId)).toBe(2n * USD);
    registry.editProduct(pro.productId, { monthlyPriceMicros: 10_000n * USD });

    // 2 USD cannot pay its own 3 USD: past due, nothing charged, nothing about its terms changed.
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({
      status: "past_due",
      period_index: 1,
      monthly_price_micros: "3000000",
    });
    const topUp = await t.client.addCredits({ accountId, amountMicros: 1n * USD, idempotencyKey: "pay" });
    expect(topUp.creditBalanceMicros).toBe(0n);
    expect(await d.row(sub.subscriptionId)).toMatchObject({ status: "active", period_index: 2 });
    expect(await d.fee(sub.subscriptionId, 2)).toMatchObject({ [`customer:${accountId}`]: -3n * USD });
  });

  it("gives the subscriber a price cut at its next renewal, and a later rise does not take it back", async () => {
    at("2030-03-10T00:00:00.000Z");
    const accountId = await d.customer(10n * USD);
    const pro = monthly(3n * USD);
    const sub = await d.subscribe(accountId, pro.productId);
    registry.editProduct(pro.productId, { monthlyPriceMicros: 1n * USD });
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({ monthly_price_micros: "1000000" });
    expect(await d.fee(sub.subscriptionId, 2)).toMatchObject({ [`customer:${accountId}`]: -1n * USD });

    registry.editProduct(pro.productId, { monthlyPriceMicros: 2n * USD });
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({
      period_index: 3,
      monthly_price_micros: "1000000",
    });
    expect(await d.fee(sub.subscriptionId, 3)).toMatchObject({ [`customer:${accountId}`]: -1n * USD });
    expect(await d.balance(accountId)).toBe(15n * USD - 3n * USD - 2n * USD);
  });

  it("prices requests at the lower of each per-token price (payg input and output, overage)", async () => {
    at("2030-04-10T00:00:00.000Z");
    const accountId = await d.customer();
    const payg = plan({ pricingModel: "payg", inputPricePer1mMicros: 2n * USD, outputPricePer1mMicros: 4n * USD });
    const overage = plan({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1n * USD,
      includedTokens: 10n,
      overagePricePer1mMicros: 2n * USD,
    });
    const paygSub = await d.subscribe(accountId, payg.productId);
    const overageSub = await d.subscribe(accountId, overage.productId);
    // The terms a grant hands the edge, which it prices each request's worst case by (and
    // settlement charges by): the subscription's snapshot.
    const terms = async (sub: typeof paygSub) =>
      (await d.grantScoped(accountId, sub.subscriptionId)).budgets[0]!.terms!;
    expect(await terms(paygSub)).toMatchObject({ inputPricePer1mMicros: 2n * USD, outputPricePer1mMicros: 4n * USD });
    expect(await terms(overageSub)).toMatchObject({ overagePricePer1mMicros: 2n * USD });

    registry.editProduct(payg.productId, { inputPricePer1mMicros: 5n * USD, outputPricePer1mMicros: 1n * USD });
    registry.editProduct(overage.productId, { overagePricePer1mMicros: 1n * USD });
    expect(await renewAtPeriodEnd(paygSub.subscriptionId)).toMatchObject({
      input_price_per_1m_micros: "2000000",
      output_price_per_1m_micros: "1000000",
    });
    expect(await d.row(overageSub.subscriptionId)).toMatchObject({ overage_price_per_1m_micros: "1000000" });
    expect(await terms(paygSub)).toMatchObject({ inputPricePer1mMicros: 2n * USD, outputPricePer1mMicros: 1n * USD });
    expect(await terms(overageSub)).toMatchObject({ overagePricePer1mMicros: 1n * USD });

    registry.editProduct(overage.productId, { overagePricePer1mMicros: 5n * USD });
    expect(await renewAtPeriodEnd(overageSub.subscriptionId)).toMatchObject({ overage_price_per_1m_micros: "1000000" });
  });

  it("takes raised limits and keeps its own when the plan's are lowered, and enforces them", async () => {
    at("2030-05-10T00:00:00.000Z");
    const accountId = await d.customer();
    const limits = {
      rpmLimit: 10n,
      tpmLimit: 10_000n,
      maxConcurrent: 3n,
      maxOutputTokens: 100n,
      maxContextTokens: 1000n,
    };
    const pro = monthly(1n * USD, limits);
    const sub = await d.subscribe(accountId, pro.productId);
    registry.editProduct(pro.productId, {
      rpmLimit: 20n,
      tpmLimit: 2_000n,
      maxConcurrent: 1n,
      maxOutputTokens: 200n,
      maxContextTokens: 500n,
    });
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({
      rpm_limit: "20",
      tpm_limit: "10000",
      max_concurrent: "3",
      max_output_tokens: "200",
      max_context_tokens: "1000",
    });

    // The edge limits by the kept terms: a cap of 200 output tokens (150 is over the old 100) and
    // a context of 1,000 (an 800-token prompt is over the edited 500). Three requests of 950
    // tokens at once (over the edited concurrency of 1), 2,850 tokens a minute (over the edited
    // tpm of 2,000): all admitted. The fourth in flight is over the kept concurrency of 3.
    for (let i = 0; i < 3; i++) {
      const lease = await d.grantScoped(accountId, sub.subscriptionId, 950n);
      expect(lease.budgets[0]!.terms).toMatchObject({ rpmLimit: 20n, maxOutputTokens: 200n, maxContextTokens: 1000n });
    }
    const fourth = await refusal(d.grantScoped(accountId, sub.subscriptionId, 950n));
    expect(fourth.code).toBe("concurrency_limit_exceeded");
  });

  it("takes more included tokens and keeps its own when the plan's are cut, and enforces them", async () => {
    at("2030-06-10T00:00:00.000Z");
    const accountId = await d.customer();
    const pro = monthly(1n * USD, { includedTokens: 100n });
    const sub = await d.subscribe(accountId, pro.productId);
    registry.editProduct(pro.productId, { includedTokens: 10n });
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({ period_index: 2, included_tokens: "100" });

    // 50 tokens used this period: over the edited 10, within the kept 100, so still admitted.
    await d.settleScoped(accountId, sub.subscriptionId, pro.hosterId, { inputTokens: 40n, outputTokens: 10n });
    await d.grantScoped(accountId, sub.subscriptionId, 10n);

    registry.editProduct(pro.productId, { includedTokens: 1000n });
    expect(await renewAtPeriodEnd(sub.subscriptionId)).toMatchObject({ period_index: 3, included_tokens: "1000" });
  });

  it("never moves a subscriber to another pricing model: its model and prices stay, its limits still compare", async () => {
    at("2030-07-10T00:00:00.000Z");
    const accountId = await d.customer();
    const pro = monthly(1n * USD, { includedTokens: 1000n });
    const payg = plan({ pricingModel: "payg", inputPricePer1mMicros: 2n * USD, outputPricePer1mMicros: 4n * USD });
    const proSub = await d.subscribe(accountId, pro.productId);
    const paygSub = await d.subscribe(accountId, payg.productId);
    // The hoster's API cannot change a plan's model (registry refuses it); billing holds the rule anyway.
    registry.editProduct(pro.productId, {
      pricingModel: "payg",
      monthlyPriceMicros: 0n,
      includedTokens: 0n,
      inputPricePer1mMicros: 1n,
      outputPricePer1mMicros: 1n,
      rpmLimit: 120n,
    });
    registry.editProduct(payg.productId, {
      pricingModel: "subscription",
      monthlyPriceMicros: 10_000n * USD,
      includedTokens: 10_000_000_000n,
      inputPricePer1mMicros: 0n,
      outputPricePer1mMicros: 0n,
    });

    expect(await renewAtPeriodEnd(proSub.subscriptionId)).toMatchObject({
      status: "active",
      pricing_model: "subscription",
      monthly_price_micros: "1000000",
      included_tokens: "1000",
      input_price_per_1m_micros: "0",
      output_price_per_1m_micros: "0",
      rpm_limit: "120",
    });
    expect(await d.fee(proSub.subscriptionId, 2)).toMatchObject({ [`customer:${accountId}`]: -1n * USD });
    expect(await d.row(paygSub.subscriptionId)).toMatchObject({
      status: "active",
      period_index: 2,
      pricing_model: "payg",
      monthly_price_micros: "0",
      included_tokens: "0",
      input_price_per_1m_micros: "2000000",
      output_price_per_1m_micros: "4000000",
    });
    expect(await d.feeCount(paygSub.subscriptionId)).toBe(0);
    // The customer's listing shows the terms it renews on.
    const { subscriptions } = await t.client.listSubscriptions({ accountId });
    expect(subscriptions.find((s) => s.subscriptionId === paygSub.subscriptionId)!.terms).toMatchObject({
      pricingModel: "payg",
      inputPricePer1mMicros: 2n * USD,
      outputPricePer1mMicros: 4n * USD,
    });
  });

  it("renews an archived plan's subscribers on their own terms, and a plan registry forgot too", async () => {
    at("2030-08-10T00:00:00.000Z");
    const accountId = await d.customer(10n * USD);
    const archived = monthly(2n * USD, { rpmLimit: 10n });
    const forgotten = monthly(1n * USD, { rpmLimit: 10n });
    const archivedSub = await d.subscribe(accountId, archived.productId);
    const forgottenSub = await d.subscribe(accountId, forgotten.productId);
    // Edited, then archived before the renewal: the subscriber's own terms hold, better or worse.
    registry.editProduct(archived.productId, { monthlyPriceMicros: 5n * USD, rpmLimit: 100n });
    registry.archiveProduct(archived.productId);
    registry.forgetProduct(forgotten.productId);

    expect(await renewAtPeriodEnd(archivedSub.subscriptionId)).toMatchObject({
      status: "active",
      period_index: 2,
      monthly_price_micros: "2000000",
      rpm_limit: "10",
    });
    expect(await d.fee(archivedSub.subscriptionId, 2)).toMatchObject({ [`customer:${accountId}`]: -2n * USD });
    expect(await d.row(forgottenSub.subscriptionId)).toMatchObject({ status: "active", period_index: 2 });
    expect(await d.fee(forgottenSub.subscriptionId, 2)).toMatchObject({ [`customer:${accountId}`]: -1n * USD });
    expect(await d.balance(accountId)).toBe(15n * USD - 2n * 3n * USD);

    // Closed to new subscribers.
    expect((await refusal(d.subscribe(await d.customer(), archived.productId))).code).toBe("invalid_request");
  });
});
