import { describe, expect, it } from "vitest";
import { affordableOutput, chargesAnything, planPricing, requestCharge, worstCaseCharge } from "../src/request-cost.ts";

const terms = { inputPricePer1m: 2_500_000n, outputPricePer1m: 9_999_999n, overagePricePer1m: 3_333_333n };
const tokens = (inputTokens: bigint, outputTokens: bigint) => ({ inputTokens, outputTokens });
const withCache = (inputTokens: bigint, outputTokens: bigint, cachedInputTokens: bigint) => ({
  inputTokens,
  outputTokens,
  cachedInputTokens,
});

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

describe("requestCharge with cached input tokens", () => {
  const route = { inputPricePer1m: 3_000_000n, outputPricePer1m: 15_000_000n, cachedInputPricePer1m: 300_000n };

  it("prices the cached part of the input at the cached price", () => {
    // ceil((200 × 3 + 9800 × 0.3 + 100 × 15) micro-USD) = 600 + 2940 + 1500 = 5040.
    expect(requestCharge(withCache(10_000n, 100n, 9_800n), route, 1_000_000n)).toEqual({
      cost: 5_040n,
      overageTokens: 0n,
    });
  });

  it("prices cached tokens at the input price when no cached price is set, and an explicit 0 as 0", () => {
    const plain = { inputPricePer1m: 3_000_000n, outputPricePer1m: 15_000_000n };
    expect(requestCharge(withCache(10_000n, 100n, 9_800n), plain, 1_000_000n).cost).toBe(31_500n);
    const zero = { ...plain, cachedInputPricePer1m: 0n };
    // ceil(200 × 3 + 100 × 15) = 2100: the cached 9,800 cost nothing.
    expect(requestCharge(withCache(10_000n, 100n, 9_800n), zero, 1_000_000n).cost).toBe(2_100n);
  });

  it("clamps cached tokens to [0, input] itself: never negative, never above the fresh price", () => {
    const fresh = requestCharge(withCache(1_000n, 10n, 0n), route, 1_000_000n).cost;
    expect(requestCharge(withCache(1_000n, 10n, -50n), route, 1_000_000n).cost).toBe(fresh);
    const allCached = requestCharge(withCache(1_000n, 10n, 1_000n), route, 1_000_000n).cost;
    expect(requestCharge(withCache(1_000n, 10n, 99_999n), route, 1_000_000n).cost).toBe(allCached);
    // ceil(1000 × 0.3 + 10 × 15) = 450.
    expect(allCached).toBe(450n);
  });

  it("is still at most the worst case", () => {
    expect(requestCharge(withCache(10_000n, 100n, 9_800n), route, 4_000n).cost).toBe(4_000n);
  });

  it("worstCaseCharge holds every input token at the fresh price", () => {
    expect(worstCaseCharge(tokens(10_000n, 100n), [route])).toBe(31_500n);
  });
});

describe("requestCharge of a subscription_overage request with cached tokens", () => {
  const overageTerms = { ...terms, overagePricePer1m: 4_000_000n, cachedInputPricePer1m: 400_000n };
  const overage = (included: bigint) => planPricing("subscription_overage", overageTerms, included);

  it("covers fresh input and output with included tokens first; the cached tokens left over pay the cached price", () => {
    // 1,000 input (800 cached) + 100 output = 1,100 tokens, 600 included: 500 beyond. Cached tokens
    // are the last the included tokens cover, so all 500 beyond are cached: ceil(500 × 0.4) = 200.
    expect(requestCharge(withCache(1_000n, 100n, 800n), overage(600n), 10_000n)).toEqual({
      cost: 200n,
      overageTokens: 500n,
    });
  });

  it("charges fresh overage tokens once the cached ones are all beyond the included tokens", () => {
    // 1,100 tokens, 200 included: 900 beyond, of which the 800 cached pay 0.4 and 100 fresh pay 4:
    // ceil(800 × 0.4 + 100 × 4) = 720.
    expect(requestCharge(withCache(1_000n, 100n, 800n), overage(200n), 10_000n)).toEqual({
      cost: 720n,
      overageTokens: 900n,
    });
  });

  it("within the included tokens costs nothing, cached or not", () => {
    expect(requestCharge(withCache(1_000n, 100n, 800n), overage(1_100n), 10_000n)).toEqual({
      cost: 0n,
      overageTokens: 0n,
    });
  });

  it("past the worst case pays for the cheapest overage tokens first and counts only those", () => {
    // 900 beyond as above (720 uncapped); a worst case of 500 pays the 800 cached (320) and then
    // floor(180 / 4 × 1M / 1M) = 45 fresh (180): 845 tokens, 500 micro-USD.
    expect(requestCharge(withCache(1_000n, 100n, 800n), overage(200n), 500n)).toEqual({
      cost: 500n,
      overageTokens: 845n,
    });
  });

  it("uses the overage price for cached tokens when the plan sets no cached price", () => {
    const plain = planPricing("subscription_overage", { ...terms, overagePricePer1m: 4_000_000n }, 200n);
    expect(requestCharge(withCache(1_000n, 100n, 800n), plain, 10_000n).cost).toBe(3_600n);
  });

  it("payg plans take their cached price through planPricing", () => {
    const payg = planPricing("payg", { ...terms, cachedInputPricePer1m: 250_000n }, 0n);
    // ceil(234 × 2.5 + 1000 × 0.25 + 567 × 9.999999) = ceil(585 + 250 + 5669.999433) = 6505.
    expect(requestCharge(withCache(1_234n, 567n, 1_000n), payg, 100_000n).cost).toBe(6_505n);
  });
});
