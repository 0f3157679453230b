import { describe, expect, it } from "vitest";
import { count, usd } from "../src/lib/format.ts";
import { intervalFor, requestColumns, tokenColumns, type UsageBucket } from "../src/lib/usage-series.ts";
import { priceLine, type Plan } from "../src/lib/plan.ts";

describe("usd", () => {
  it("shows cents for balances and more digits for the cost of one answer", () => {
    expect(usd(5)).toBe("$5.00");
    expect(usd(1234.5)).toBe("$1,234.50");
    expect(usd(0.000043)).toBe("$0.000043");
    expect(usd(0)).toBe("$0.00");
    expect(usd(0.012345, { exact: true })).toBe("$0.012345");
    expect(usd(0.0123, { exact: true })).toBe("$0.0123");
    expect(usd(2, { exact: true })).toBe("$2.00");
    expect(usd(null)).toBe("–");
    expect(count(1234567)).toBe("1,234,567");
  });
});

describe("usage series", () => {
  const bucket = (period: string, n: number): UsageBucket => ({
    period,
    input_tokens: n,
    output_tokens: 2 * n,
    cost_usd: n / 1e6,
    requests: n,
    local_requests: n,
    hoster_requests: 0,
    cloud_requests: 0,
  });

  it("draws a day by the hour and longer ranges by the day", () => {
    expect(intervalFor(1)).toBe("hour");
    expect(intervalFor(90)).toBe("day");
  });

  it("turns buckets into uPlot columns with x in Unix seconds", () => {
    const series = [bucket("2026-11-24T00:00:00+00:00", 1), bucket("2026-11-25T00:00:00+00:00", 3)];
    expect(tokenColumns(series)).toEqual([
      [1795478400, 1795564800],
      [1, 3],
      [2, 6],
    ]);
    expect(requestColumns(series).slice(1)).toEqual([
      [1, 3],
      [0, 0],
      [0, 0],
    ]);
  });
});

describe("priceLine", () => {
  it("says what each pricing model charges", () => {
    const plan = {
      pricing_model: "subscription_overage",
      monthly_price_usd: 9.99,
      included_tokens: 5_000_000,
      overage_price_per_1m_usd: 0.5,
    } as Plan;
    expect(priceLine(plan)).toBe("$9.99 a month, 5,000,000 tokens included, then $0.50 per 1M tokens");
    expect(priceLine({ ...plan, pricing_model: "free" })).toBe("Free");
  });

  it("shows a cached-input price beside the price it discounts, and nothing when the plan has none", () => {
    const payg = {
      pricing_model: "payg",
      input_price_per_1m_usd: 0.2,
      output_price_per_1m_usd: 0.6,
      cached_input_price_per_1m_usd: 0.02,
    } as Plan;
    expect(priceLine(payg)).toBe("Pay as you go: $0.20 in ($0.02 cached) / $0.60 out per 1M tokens");
    expect(priceLine({ ...payg, cached_input_price_per_1m_usd: 0 })).toBe(
      "Pay as you go: $0.20 in ($0.00 cached) / $0.60 out per 1M tokens",
    );
    expect(priceLine({ ...payg, cached_input_price_per_1m_usd: null })).toBe(
      "Pay as you go: $0.20 in / $0.60 out per 1M tokens",
    );
    const overage = {
      pricing_model: "subscription_overage",
      monthly_price_usd: 9.99,
      included_tokens: 5_000_000,
      overage_price_per_1m_usd: 0.5,
      cached_input_price_per_1m_usd: 0.05,
    } as Plan;
    expect(priceLine(overage)).toBe(
      "$9.99 a month, 5,000,000 tokens included, then $0.50 per 1M tokens ($0.05 cached)",
    );
  });
});
