import { describe, expect, it } from "vitest";
import type { SubscriptionTerms } from "@mkt/proto/billing/v1/billing";
import { renewalTerms } from "../src/subscriptions/renewal-terms.ts";

const limits = {
  rpmLimit: 60n,
  tpmLimit: 100_000n,
  maxConcurrent: 5n,
  maxOutputTokens: 4096n,
  maxContextTokens: 8192n,
};
const none = { monthlyPriceMicros: 0n, includedTokens: 0n, inputPricePer1mMicros: 0n, outputPricePer1mMicros: 0n };
const bought: SubscriptionTerms = {
  pricingModel: "subscription_overage",
  ...none,
  monthlyPriceMicros: 1_000_000n,
  includedTokens: 1_000_000n,
  overagePricePer1mMicros: 2_000_000n,
  ...limits,
};
const offer = (terms: Partial<SubscriptionTerms>, archived = false) => ({ terms: { ...bought, ...terms }, archived });

describe("the terms a subscription renews on", () => {
  it("keeps the snapshot when the plan is unchanged", () => {
    expect(renewalTerms(bought, offer({}))).toEqual(bought);
  });

  it("keeps the old price when the plan's prices go up, takes them when they go down", () => {
    const up = { monthlyPriceMicros: 10_000_000_000n, overagePricePer1mMicros: 9_000_000n };
    expect(renewalTerms(bought, offer(up))).toEqual(bought);
    const down = { monthlyPriceMicros: 500_000n, overagePricePer1mMicros: 1_000_000n };
    expect(renewalTerms(bought, offer(down))).toEqual({ ...bought, ...down });
  });

  it("keeps the lower cached price, an absent one read as the overage price it stands for", () => {
    const cheap = { ...bought, cachedInputPricePer1mMicros: 200_000n };
    // The plan raised its cached price: the subscriber keeps 0.20.
    expect(renewalTerms(cheap, offer({ cachedInputPricePer1mMicros: 900_000n })).cachedInputPricePer1mMicros).toBe(
      200_000n,
    );
    // The plan dropped it (absent: its overage price, 2.00): still 0.20.
    expect(renewalTerms(cheap, offer({})).cachedInputPricePer1mMicros).toBe(200_000n);
    // Bought without one (2.00), the plan now offers 0.10: the subscriber gets it.
    expect(renewalTerms(bought, offer({ cachedInputPricePer1mMicros: 100_000n })).cachedInputPricePer1mMicros).toBe(
      100_000n,
    );
    // Neither has one: none (the overage price).
    expect(renewalTerms(bought, offer({})).cachedInputPricePer1mMicros).toBeUndefined();
  });

  it("takes more included tokens and higher limits, keeps its own when the plan's shrink", () => {
    const more = { includedTokens: 5_000_000n, rpmLimit: 600n, tpmLimit: 1_000_000n, maxConcurrent: 50n };
    const longer = { maxOutputTokens: 8192n, maxContextTokens: 32_768n };
    expect(renewalTerms(bought, offer({ ...more, ...longer }))).toEqual({ ...bought, ...more, ...longer });
    const less = { includedTokens: 1n, rpmLimit: 1n, tpmLimit: 1n, maxConcurrent: 1n, maxOutputTokens: 1n };
    expect(renewalTerms(bought, offer({ ...less, maxContextTokens: 1n }))).toEqual(bought);
  });

  it("decides field by field: a price up and a limit up at once gives the old price and the new limit", () => {
    const merged = renewalTerms(bought, offer({ monthlyPriceMicros: 2_000_000n, includedTokens: 10n, rpmLimit: 120n }));
    expect(merged).toEqual({ ...bought, rpmLimit: 120n });
  });

  it("compares payg prices one by one, even when that gives a price neither side had alone", () => {
    const payg = { ...bought, pricingModel: "payg", ...none, overagePricePer1mMicros: 0n };
    const snapshot = { ...payg, inputPricePer1mMicros: 0n, outputPricePer1mMicros: 3_000_000n };
    const current = { ...payg, inputPricePer1mMicros: 1_000_000n, outputPricePer1mMicros: 2_000_000n };
    expect(renewalTerms(snapshot, { terms: current, archived: false })).toEqual({
      ...payg,
      inputPricePer1mMicros: 0n,
      outputPricePer1mMicros: 2_000_000n,
    });
  });

  it("never lets a pricing model change reach the subscriber: its model and prices stay, limits still compare", () => {
    const payg = { pricingModel: "payg", ...none, overagePricePer1mMicros: 0n, inputPricePer1mMicros: 1n };
    expect(renewalTerms(bought, offer(payg))).toEqual(bought);
    expect(renewalTerms(bought, offer({ ...payg, rpmLimit: 600n, maxConcurrent: 1n }))).toEqual({
      ...bought,
      rpmLimit: 600n,
    });
    // A free plan is not a cheaper subscription either.
    expect(renewalTerms(bought, offer({ pricingModel: "free", ...none, overagePricePer1mMicros: 0n }))).toEqual(bought);
  });

  it("renews on the snapshot when the plan is archived or gone, however much better its terms", () => {
    const better = { monthlyPriceMicros: 1n, includedTokens: 9_000_000n, rpmLimit: 1000n };
    expect(renewalTerms(bought, offer(better, true))).toEqual(bought);
    expect(renewalTerms(bought, undefined)).toEqual(bought);
  });

  it("returns a new object, leaving both inputs as they were", () => {
    const snapshot = { ...bought };
    const current = offer({ monthlyPriceMicros: 1n });
    const merged = renewalTerms(snapshot, current);
    expect(merged).not.toBe(snapshot);
    expect(snapshot).toEqual(bought);
    expect(current.terms.monthlyPriceMicros).toBe(1n);
    expect(renewalTerms(snapshot, undefined)).not.toBe(snapshot);
  });
});
