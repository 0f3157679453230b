import { describe, expect, it } from "vitest";
import { planPricing, requestCharge } from "../src/request-cost.ts";

const terms = { inputPricePer1m: 2_500_000n, outputPricePer1m: 9_999_999n, overagePricePer1m: 3_333_333n };
const tokens = (inputTokens: bigint, outputTokens: bigint) => ({ inputTokens, outputTokens });

describe("requestCharge at per-1M prices", () => {
  it("is costMicros of the tokens, at most the worst case", () => {
    const route = { inputPricePer1m: 500_000n, outputPricePer1m: 1_500_000n };
    // ceil((12 × 0.5 + 48 × 1.5) micro-USD) = 78.
    expect(requestCharge(tokens(12n, 48n), route, 1_000n)).toEqual({ cost: 78n, overageTokens: 0n });
    expect(requestCharge(tokens(12n, 48n), route, 50n)).toEqual({ cost: 50n, overageTokens: 0n });
  });

  it("prices a plan's request by its pricing model, never by a route", () => {
    // payg: ceil((1234 × 2.5 + 567 × 9.999999) micro-USD) = ceil(8754.999433).
    expect(requestCharge(tokens(1_234n, 567n), planPricing("payg", terms, 0n), 13_085n).cost).toBe(8_755n);
    for (const model of ["free", "subscription"]) {
      expect(requestCharge(tokens(1_234n, 567n), planPricing(model, terms, 0n), 13_085n)).toEqual({
        cost: 0n,
        overageTokens: 0n,
      });
    }
  });
});

describe("requestCharge of a subscription_overage request", () => {
  const overage = (included: bigint) => planPricing("subscription_overage", terms, included);

  it("charges nothing for tokens within what it took from the included tokens", () => {
    expect(requestCharge(tokens(300n, 200n), overage(500n), 0n)).toEqual({ cost: 0n, overageTokens: 0n });
    // It took more than it used: the rest goes back to the period at settlement, not charged.
    expect(requestCharge(tokens(100n, 50n), overage(700n), 0n)).toEqual({ cost: 0n, overageTokens: 0n });
  });

  it("charges the overage price on every token beyond them, input and output alike", () => {
    // 650 used, 500 included: ceil(150 × 3.333333) = 500 micro-USD.
    expect(requestCharge(tokens(300n, 350n), overage(500n), 667n)).toEqual({ cost: 500n, overageTokens: 150n });
    // None included: ceil(200 × 3.333333) = 667.
    expect(requestCharge(tokens(100n, 100n), overage(0n), 667n)).toEqual({ cost: 667n, overageTokens: 200n });
  });

  it("never charges more than the worst case, nor counts overage it did not pay for", () => {
    // A worst case of 100 micro-USD pays for 30 tokens at this price.
    expect(requestCharge(tokens(100n, 100n), overage(0n), 100n)).toEqual({ cost: 100n, overageTokens: 30n });
    expect(requestCharge(tokens(100n, 100n), overage(0n), 0n)).toEqual({ cost: 0n, overageTokens: 0n });
  });

  it("reads a negative included count as none", () => {
    expect(requestCharge(tokens(100n, 100n), overage(-5n), 1_000n)).toEqual({ cost: 667n, overageTokens: 200n });
  });
});
