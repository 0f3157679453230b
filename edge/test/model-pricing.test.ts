import { describe, expect, it } from "vitest";
import { renderPricing, usdPerTokenText } from "../src/routes/model-pricing.ts";

describe("OpenRouter's pricing strings", () => {
  it("renders micro-USD per 1M tokens exactly as USD per token", () => {
    expect(usdPerTokenText(500_000n)).toBe("0.0000005"); // 0.50 USD per 1M
    expect(usdPerTokenText(50_000n)).toBe("0.00000005");
    expect(usdPerTokenText(1n)).toBe("0.000000000001");
    expect(usdPerTokenText(0n)).toBe("0");
    expect(usdPerTokenText(1_234_567_890_000_000n)).toBe("1234.56789");
  });

  it("prices a cache read at the input price where no cached price is set, and an explicit 0 at 0", () => {
    expect(renderPricing({ input: 500_000n, output: 1_500_000n, cachedInput: undefined })).toEqual({
      prompt: "0.0000005",
      completion: "0.0000015",
      input_cache_read: "0.0000005",
    });
    expect(renderPricing({ input: 500_000n, output: 0n, cachedInput: 0n }).input_cache_read).toBe("0");
  });
});
