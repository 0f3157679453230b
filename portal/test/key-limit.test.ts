import { describe, expect, it } from "vitest";
import { describeLimit, limitBody } from "../src/lib/key-limit.ts";

describe("key spend limits in the portal", () => {
  it("describes a key's limit, its window's spend and what is left, or what a key without one spent", () => {
    const limited = describeLimit({
      limit_usd: 5,
      limit_reset: "daily",
      spend_usd: 0.42,
      limit_remaining_usd: 4.58,
      limit_resets_at: "2030-01-08T00:00:00+00:00",
    });
    expect(limited).toMatch(/^\$0\.42 of \$5\.00 per day spent, \$4\.58 left, resets /);
    const open = {
      limit_usd: null,
      limit_reset: null,
      spend_usd: 1.5,
      limit_remaining_usd: null,
      limit_resets_at: null,
    };
    expect(describeLimit(open)).toBe("No limit ($1.50 spent)");
  });

  it("sends an empty amount as no limit and refuses one that is not a positive number", () => {
    expect(limitBody(" 2.50 ", "monthly")).toEqual({ limit_usd: 2.5, limit_reset: "monthly" });
    expect(limitBody("", "")).toEqual({ limit_usd: null, limit_reset: null });
    expect(() => limitBody("-1", "daily")).toThrow(/spend limit in USD/);
    expect(() => limitBody("abc", "daily")).toThrow(/spend limit in USD/);
  });
});
