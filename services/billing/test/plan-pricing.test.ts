import { describe, expect, it } from "vitest";
import {
  affordableOutput,
  holdFor,
  overageCharge,
  type Allowance,
  type PlanPrices,
} from "../src/subscriptions/plan-pricing.ts";

const overagePlan: PlanPrices = {
  pricingModel: "subscription_overage",
  inputPricePer1m: 0n,
  outputPricePer1m: 0n,
  overagePricePer1m: 2_000_000n, // $2 per 1M: 2 micro-USD a token
  includedTokens: 1_000n,
};
const fresh: Allowance = { usedTokens: 0n, overageTokens: 0n, claimedTokens: 0n };

describe("holdFor", () => {
  it("holds nothing for a worst case inside the unclaimed allowance, and claims it", () => {
    expect(holdFor(overagePlan, fresh, 300n, 200n)).toEqual({ reserved: 0n, claim: 500n });
  });

  it("holds the part of the worst case beyond what is left unclaimed, at the overage price", () => {
    const allowance = { usedTokens: 600n, overageTokens: 0n, claimedTokens: 100n };
    // 300 unclaimed; worst case 500 → 200 tokens of overage = 400 micro-USD.
    expect(holdFor(overagePlan, allowance, 300n, 200n)).toEqual({ reserved: 400n, claim: 300n });
  });

  it("adds overage left unpaid by requests that finished out of order", () => {
    const allowance = { usedTokens: 1_050n, overageTokens: 20n, claimedTokens: 0n };
    expect(holdFor(overagePlan, allowance, 10n, 10n)).toEqual({ reserved: 2n * (20n + 30n), claim: 0n });
  });

  it("prices payg from the plan and holds nothing for free and subscription plans", () => {
    const payg: PlanPrices = {
      ...overagePlan,
      pricingModel: "payg",
      inputPricePer1m: 1_000_000n,
      outputPricePer1m: 3n,
    };
    // ceil((100 × 1,000,000 + 50 × 3) / 1M) = 101
    expect(holdFor(payg, fresh, 100n, 50n)).toEqual({ reserved: 101n, claim: 0n });
    expect(holdFor({ ...overagePlan, pricingModel: "free" }, fresh, 100n, 50n)).toEqual({ reserved: 0n, claim: 0n });
    expect(holdFor({ ...overagePlan, pricingModel: "subscription" }, fresh, 100n, 50n).reserved).toBe(0n);
  });
});

describe("affordableOutput", () => {
  it("gives an overage plan the unclaimed tokens plus what the balance pays, less the prompt", () => {
    // 500 unclaimed + 10 micro-USD pays 5 tokens; prompt 100 → 405 output tokens.
    const allowance = { usedTokens: 400n, overageTokens: 0n, claimedTokens: 100n };
    expect(affordableOutput(overagePlan, allowance, 10n, 100n)).toBe(405n);
    const out = affordableOutput(overagePlan, allowance, 10n, 100n);
    expect(holdFor(overagePlan, allowance, 100n, out).reserved).toBe(10n);
    expect(affordableOutput(overagePlan, { ...allowance, usedTokens: 2_000n }, 10n, 100n)).toBe(0n);
  });
});

describe("overageCharge", () => {
  const base = { includedTokens: 1_000n, overagePricePer1m: 3_333_333n, reserved: 1_000_000n };

  it("charges nothing within the allowance", () => {
    expect(overageCharge({ ...base, usedBefore: 0n, overageBefore: 0n, tokens: 1_000n })).toEqual({
      overageTokens: 0n,
      cost: 0n,
    });
  });

  it("charges a request crossing the line only for the part beyond it", () => {
    // 900 used + 250 → 150 beyond: ceil(150 × 3.333333) = 500 micro-USD.
    expect(overageCharge({ ...base, usedBefore: 900n, overageBefore: 0n, tokens: 250n })).toEqual({
      overageTokens: 150n,
      cost: 500n,
    });
  });

  it("charges every token once the allowance is used, and never more than the hold", () => {
    expect(overageCharge({ ...base, usedBefore: 1_150n, overageBefore: 150n, tokens: 200n })).toEqual({
      overageTokens: 200n,
      cost: 667n,
    });
    // A hold of 100 micro-USD pays for 30 tokens at this price.
    expect(overageCharge({ ...base, reserved: 100n, usedBefore: 1_150n, overageBefore: 150n, tokens: 200n })).toEqual({
      overageTokens: 30n,
      cost: 100n,
    });
  });

  it("lets the next request pay overage an earlier hold could not", () => {
    // 1,100 used but only 50 charged: 50 tokens of debt, plus this request's 10.
    expect(overageCharge({ ...base, usedBefore: 1_100n, overageBefore: 50n, tokens: 10n }).overageTokens).toBe(60n);
  });
});
