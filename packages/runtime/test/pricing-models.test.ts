import { describe, expect, it } from "vitest";
import { max, max0, min } from "../src/bigint-math.ts";
import {
  chargesMonthly,
  chargesOverage,
  chargesPerToken,
  hasIncludedTokens,
  isPricingModel,
  PRICING_MODELS,
  stopsAtIncludedTokens,
} from "../src/pricing-models.ts";

describe("pricing models", () => {
  it("name each model's charges once", () => {
    const row = (model: string) => [
      chargesPerToken(model),
      chargesMonthly(model),
      hasIncludedTokens(model),
      chargesOverage(model),
      stopsAtIncludedTokens(model),
    ];
    expect(Object.fromEntries(PRICING_MODELS.map((model) => [model, row(model)]))).toEqual({
      free: [false, false, false, false, false],
      payg: [true, false, false, false, false],
      subscription: [false, true, true, false, true],
      subscription_overage: [false, true, true, true, false],
    });
    expect(row("")).toEqual([false, false, false, false, false]);
  });

  it("knows its own list", () => {
    expect(PRICING_MODELS.every(isPricingModel)).toBe(true);
    expect(isPricingModel("Payg")).toBe(false);
  });
});

describe("bigint min, max, max0", () => {
  it("work as Math's do", () => {
    expect(min(3n, -1n, 2n)).toBe(-1n);
    expect(max(3n, -1n, 7n)).toBe(7n);
    expect(min(5n)).toBe(5n);
    expect(max0(-4n)).toBe(0n);
    expect(max0(4n)).toBe(4n);
  });
});
