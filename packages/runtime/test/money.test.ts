import { describe, expect, it } from "vitest";
import {
  affordableOutputTokens,
  costMicros,
  microsToUsd,
  microsToUsdText,
  splitRevenue,
  usdToMicros,
} from "../src/money.ts";

describe("usdToMicros", () => {
  it("parses decimal strings and numbers exactly", () => {
    expect(usdToMicros("5.00")).toBe(5_000_000n);
    expect(usdToMicros("0.000001")).toBe(1n);
    expect(usdToMicros(0.15)).toBe(150_000n);
    expect(usdToMicros("12")).toBe(12_000_000n);
    expect(usdToMicros("-1.5")).toBe(-1_500_000n);
  });

  it("refuses what is not an amount", () => {
    expect(() => usdToMicros("abc")).toThrow(RangeError);
    expect(() => usdToMicros("1e3")).toThrow(RangeError);
  });

  it("renders back to a USD number", () => {
    expect(microsToUsd(4_999_237n)).toBe(4.999237);
  });

  it("renders exact six-decimal text for files", () => {
    expect(microsToUsdText(4_999_237n)).toBe("4.999237");
    expect(microsToUsdText(1n)).toBe("0.000001");
    expect(microsToUsdText(0n)).toBe("0.000000");
    expect(microsToUsdText(12_000_000n)).toBe("12.000000");
    expect(microsToUsdText(-1_500_000n)).toBe("-1.500000");
  });
});

describe("costMicros", () => {
  it("rounds the total up to the next micro-dollar, once", () => {
    // 10 input at 0.50/1M + 3 output at 1.50/1M = 5 + 4.5 = 9.5 micro-USD → 10
    expect(costMicros(10n, 3n, 500_000n, 1_500_000n)).toBe(10n);
    expect(costMicros(2n, 0n, 500_000n, 1_500_000n)).toBe(1n);
    expect(costMicros(0n, 0n, 500_000n, 1_500_000n)).toBe(0n);
    expect(costMicros(1_000_000n, 1_000_000n, 500_000n, 1_500_000n)).toBe(2_000_000n);
  });
});

describe("affordableOutputTokens", () => {
  it("is the most output the budget pays for after the input", () => {
    const budget = 10n;
    const out = affordableOutputTokens(budget, 10n, 500_000n, 1_500_000n);
    expect(costMicros(10n, out, 500_000n, 1_500_000n)).toBeLessThanOrEqual(budget);
    expect(costMicros(10n, out + 1n, 500_000n, 1_500_000n)).toBeGreaterThan(budget);
  });

  it("is zero when the input alone exceeds the budget", () => {
    expect(affordableOutputTokens(1n, 1_000n, 500_000n, 1_500_000n)).toBe(0n);
  });
});

describe("splitRevenue", () => {
  it("gives the platform floor(20%) and the hoster the rest, adding up exactly", () => {
    for (const cost of [0n, 1n, 7n, 99n, 1_000_001n]) {
      const { platformFee, hosterEarned } = splitRevenue(cost, true);
      expect(platformFee + hosterEarned).toBe(cost);
      expect(platformFee).toBe((cost * 20n) / 100n);
    }
  });

  it("keeps platform-served costs whole as platform fee", () => {
    expect(splitRevenue(99n, false)).toEqual({ platformFee: 99n, hosterEarned: 0n });
  });
});
