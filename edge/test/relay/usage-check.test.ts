import { describe, expect, it } from "vitest";
import { usageMismatch } from "../../src/relay/usage-check.ts";

const check = (
  promptTokens: unknown,
  completionTokens: unknown,
  counted = { prompt: 100n, output: 50n, cap: 1000n },
  relayedWhole = true,
) =>
  usageMismatch({
    reported: { promptTokens, completionTokens },
    promptTokens: counted.prompt,
    deliveredOutputTokens: counted.output,
    maxOutputTokens: counted.cap,
    relayedWhole,
  });

describe("usageMismatch", () => {
  it("accepts a report equal to the count, or above it by at most max(5 tokens, 10%)", () => {
    expect(check(100, 50)).toBeUndefined();
    expect(check(110, 55)).toBeUndefined();
    // Small answers get 5 tokens of room rather than 10% of almost nothing.
    expect(check(100, 5, { prompt: 100n, output: 0n, cap: 1000n })).toBeUndefined();
  });

  it("accepts any report below the count: another tokenizer (one token a word), not a lie", () => {
    expect(check(90, 45)).toBeUndefined();
    expect(check(1, 1)).toBeUndefined();
    expect(check(0, 0)).toBeUndefined();
  });

  it("flags output or input above the count by more than the tolerance", () => {
    expect(check(100, 56)).toBe("output");
    expect(check(100, 6, { prompt: 100n, output: 0n, cap: 1000n })).toBe("output");
    expect(check(111, 50)).toBe("input");
  });

  it("flags a cached count above the report's own prompt count, or above ours beyond the tolerance", () => {
    const cachedCheck = (promptTokens: number, cachedTokens: unknown) =>
      usageMismatch({
        reported: { promptTokens, completionTokens: 50, cachedTokens },
        promptTokens: 100n,
        deliveredOutputTokens: 50n,
        maxOutputTokens: 1000n,
        relayedWhole: true,
      });
    expect(cachedCheck(100, 80)).toBeUndefined();
    expect(cachedCheck(100, 100)).toBeUndefined();
    // Within the tolerance above our count, as the prompt count itself may be.
    expect(cachedCheck(105, 104)).toBeUndefined();
    expect(cachedCheck(100, 101)).toBe("cached");
    expect(cachedCheck(90, 95)).toBe("cached");
    // A garbled cached count is not a claim (billing reads it as none).
    expect(cachedCheck(100, "lots")).toBeUndefined();
  });

  it("flags output above the cap the upstream was sent, with no tolerance", () => {
    // 12 output tokens by the server's own count for max_tokens 10: it ran past max_tokens.
    const counted = { prompt: 100n, output: 30n, cap: 10n };
    expect(check(100, 10, counted)).toBeUndefined();
    expect(check(100, 11, counted)).toBe("output");
  });

  it("judges an answer the runaway guard cut against the cap only (more was generated than relayed)", () => {
    const counted = { prompt: 100n, output: 47n, cap: 10n };
    expect(check(100, 10, { ...counted, output: 2n }, false)).toBeUndefined();
    expect(check(100, 11, counted, false)).toBe("output");
    expect(check(200, 5, counted, false)).toBe("input");
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
    expect(
      usageMismatch({
        reported: undefined,
        promptTokens: 10n,
        deliveredOutputTokens: 10n,
        maxOutputTokens: 10n,
        relayedWhole: true,
      }),
    ).toBeUndefined();
  });
});
