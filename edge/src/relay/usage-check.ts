import { aboveTolerance } from "@mkt/runtime/usage-tolerance";
import { validCount, type ReportedUsage } from "./billed-usage.ts";

/** Why a usage report disagrees with the edge's count. */
export type UsageMismatch = "invalid_report" | "input" | "output" | "cached";

/** A report past this is not a count at all (no context window comes near it). */
const MAX_PLAUSIBLE_TOKENS = 100_000_000n;

/**
 * Does an upstream's usage report claim more than the edge can account for?
 * Billing never trusts it either way (billedUsage); this only flags the hoster. No report is not
 * a mismatch (many servers send none, and billing then uses the edge's count); a report whose
 * counts are missing, not numbers, negative or absurdly large is.
 *
 * Only a report ABOVE our count is a mismatch: input above the edge's prompt count, output above
 * the tokens relayed, each beyond max(5 tokens, 10%) (chat-template overhead, tokenizers that
 * split a little differently). A report below our count is another tokenizer (a model that counts
 * words, say), not a lie, and it only lowers the bill. Output above the cap the upstream was sent
 * (`max_tokens` × n) is a mismatch too, with no tolerance: the server counts with its own
 * tokenizer, the one `max_tokens` bounds, so an honest server never reports more.
 *
 * A report claiming more cached prompt tokens than prompt tokens (its own, or the edge's count)
 * is a mismatch too (`cached`): billing prices cached tokens at a discount, clamped to the billed
 * input, so the claim costs the customer nothing, but the hoster is shown it.
 *
 * Call it for an answer that ended (not failed or cancelled). For one the runaway guard cut
 * (`relayedWhole` false) the server generated more than was relayed, so its output is judged
 * against the cap only; its overrun itself is counted by the runaway metric, not here.
 */
export function usageMismatch(args: {
  reported: ReportedUsage | undefined;
  promptTokens: bigint;
  deliveredOutputTokens: bigint;
  /** The output cap of the whole request: the granted max_tokens × n. */
  maxOutputTokens: bigint;
  relayedWhole: boolean;
}): UsageMismatch | undefined {
  if (!args.reported) return undefined;
  const input = validCount(args.reported.promptTokens);
  const output = validCount(args.reported.completionTokens);
  if (input === undefined || output === undefined) return "invalid_report";
  if (input > MAX_PLAUSIBLE_TOKENS || output > MAX_PLAUSIBLE_TOKENS) return "invalid_report";
  if (output > args.maxOutputTokens) return "output";
  if (args.relayedWhole && aboveTolerance(output, args.deliveredOutputTokens)) return "output";
  if (aboveTolerance(input, args.promptTokens)) return "input";
  const cached = validCount(args.reported.cachedTokens);
  if (cached !== undefined && (cached > input || aboveTolerance(cached, args.promptTokens))) return "cached";
  return undefined;
}
