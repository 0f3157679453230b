import { validCount, type ReportedUsage } from "./billed-usage.ts";

/** The larger of these is the room an honest server's count gets around the registry's. */
export const MISMATCH_MIN_TOKENS = 5n;
export const MISMATCH_PERCENT = 10n;

/** Why a usage report disagrees with the registry's count. */
export type UsageMismatch = "invalid_report" | "input" | "output";

/** A report past this is not a count at all (no context window comes near it). */
const MAX_PLAUSIBLE_TOKENS = 100_000_000n;

function beyondTolerance(reported: bigint, counted: bigint): boolean {
  const diff = reported > counted ? reported - counted : counted - reported;
  const percent = (counted * MISMATCH_PERCENT) / 100n;
  return diff > (percent > MISMATCH_MIN_TOKENS ? percent : MISMATCH_MIN_TOKENS);
}

/**
 * Does an upstream's usage report disagree with the registry's own count (DESIGN.md §5)? Billing
 * never trusts it either way (billedUsage); this only flags the hoster. No report is not a
 * mismatch (many servers send none, and billing then uses the registry's count); a report whose
 * counts are missing, not numbers, negative or absurdly large is. Input is compared with the
 * edge's prompt count, output with the tokens the registry relayed; each may differ by
 * max(5 tokens, 10%) before it counts, which covers chat-template overhead and tokenizers that
 * split a little differently. Call it only for an answer relayed whole (not cut at the cap, not
 * failed or cancelled): otherwise the registry's count is not the whole answer.
 */
export function usageMismatch(args: {
  reported: ReportedUsage | undefined;
  promptTokens: bigint;
  deliveredOutputTokens: bigint;
}): UsageMismatch | undefined {
  if (!args.reported) return undefined;
  const input = validCount(args.reported.promptTokens);
  const output = validCount(args.reported.completionTokens);
  if (input === undefined || output === undefined) return "invalid_report";
  if (input > MAX_PLAUSIBLE_TOKENS || output > MAX_PLAUSIBLE_TOKENS) return "invalid_report";
  if (beyondTolerance(output, args.deliveredOutputTokens)) return "output";
  if (beyondTolerance(input, args.promptTokens)) return "input";
  return undefined;
}
