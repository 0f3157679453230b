import { describe, expect, it } from "vitest";
import { usageMismatch } from "../src/chat/usage-check.ts";

const check = (promptTokens: unknown, completionTokens: unknown, counted = { prompt: 100n, output: 50n }) =>
  usageMismatch({
    reported: { promptTokens, completionTokens },
    promptTokens: counted.prompt,
    deliveredOutputTokens: counted.output,
  });

describe("usageMismatch", () => {
  it("accepts a report equal to the count, or off by at most max(5 tokens, 10%)", () => {
    expect(check(100, 50)).toBeUndefined();
    expect(check(110, 55)).toBeUndefined();
    expect(check(90, 45)).toBeUndefined();
    // Small answers get 5 tokens of room rather than 10% of almost nothing.
    expect(check(100, 5, { prompt: 100n, output: 0n })).toBeUndefined();
  });

  it("flags output or input off by more than the tolerance, either way", () => {
    expect(check(100, 56)).toBe("output");
    expect(check(100, 44)).toBe("output");
    expect(check(100, 6, { prompt: 100n, output: 0n })).toBe("output");
    expect(check(111, 50)).toBe("input");
    expect(check(89, 50)).toBe("input");
  });

  it("flags a report with counts that are missing, not numbers, negative or absurd", () => {
    for (const [input, output] of [
      [undefined, 50],
      [100, null],
      ["100", 50],
      [-1, 50],
      [100, Number.NaN],
      [100, Number.POSITIVE_INFINITY],
      [Number.MAX_VALUE, 50],
      [100, 1e12],
    ]) {
      expect(check(input, output)).toBe("invalid_report");
    }
  });

  it("does not flag a missing report", () => {
    expect(usageMismatch({ reported: undefined, promptTokens: 10n, deliveredOutputTokens: 10n })).toBeUndefined();
  });
});
