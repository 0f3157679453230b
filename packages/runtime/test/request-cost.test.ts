import { describe, expect, it } from "vitest";
import { affordableOutput, chargesAnything, planPricing, requestCharge, worstCaseCharge } from "../src/request-cost.ts";

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

describe("worstCaseCharge, the worst case admission holds", () => {
  it("is the dearest route's charge for at most these tokens", () => {
    const cheap = { inputPricePer1m: 500_000n, outputPricePer1m: 1_500_000n };
    const dear = { inputPricePer1m: 1_000_000n, outputPricePer1m: 2_000_000n };
    // ceil(12 × 1 + 48 × 2) = 108 beats ceil(12 × 0.5 + 48 × 1.5) = 78.
    expect(worstCaseCharge(tokens(12n, 48n), [cheap, dear])).toBe(108n);
    expect(worstCaseCharge(tokens(12n, 48n), [])).toBe(0n);
  });

  it("never lets the charge pass it, whichever pricing answers", () => {
    const pricings = [planPricing("payg", terms, 0n), planPricing("subscription_overage", terms, 100n)];
    for (const pricing of pricings) {
      const worstCase = worstCaseCharge(tokens(400n, 300n), [pricing]);
      const used = requestCharge(tokens(400n, 300n), pricing, worstCase);
      expect(used.cost).toBe(worstCase);
      expect(requestCharge(tokens(40n, 30n), pricing, worstCase).cost).toBeLessThanOrEqual(worstCase);
    }
  });

  it("charges an overage plan's tokens beyond its included ones at the overage price", () => {
    // 700 tokens, 100 included: ceil(600 × 3.333333) = 2000.
    expect(worstCaseCharge(tokens(400n, 300n), [planPricing("subscription_overage", terms, 100n)])).toBe(2_000n);
    expect(worstCaseCharge(tokens(400n, 300n), [planPricing("subscription_overage", terms, 900n)])).toBe(0n);
  });
});

describe("affordableOutput", () => {
  it("is the fewest output tokens a spare credit pays for on every route", () => {
    const cheap = { inputPricePer1m: 0n, outputPricePer1m: 1_000_000n };
    const dear = { inputPricePer1m: 1_000_000n, outputPricePer1m: 2_000_000n };
    // 100 micro-USD after a 10-token prompt: 100 tokens on the cheap route, (100 - 10) / 2 on the dear one.
    expect(affordableOutput(100n, 10n, [cheap, dear])).toBe(45n);
  });

  it("on an overage plan, is what the included tokens leave plus what the credit pays at the overage price", () => {
    const pricing = planPricing("subscription_overage", { ...terms, overagePricePer1m: 2_000_000n }, 50n);
    expect(affordableOutput(100n, 30n, [pricing])).toBe(70n);
    expect(affordableOutput(0n, 80n, [pricing])).toBe(0n);
  });

  it("says whether anything is charged at all", () => {
    expect(chargesAnything([planPricing("free", terms, 0n), planPricing("subscription", terms, 0n)])).toBe(false);
    expect(chargesAnything([planPricing("subscription_overage", terms, 0n)])).toBe(true);
    expect(chargesAnything([planPricing("payg", terms, 0n)])).toBe(true);
  });
});
