/**
 * How far a server's token count may stand above ours before it is a mismatch: max(5 tokens, 10%
 * of ours). Room for chat-template overhead and tokenizers that split a little differently; a
 * count BELOW ours is never one (another tokenizer, and it only lowers the bill). The edge judges
 * every answer's usage report by it, and registry's verification probes judge hosters by it.
 */
export const MISMATCH_MIN_TOKENS = 5n;
export const MISMATCH_PERCENT = 10n;

/** Is `reported` above `counted` by more than max(5 tokens, 10% of `counted`)? */
export function aboveTolerance(reported: bigint, counted: bigint): boolean {
  const percent = (counted * MISMATCH_PERCENT) / 100n;
  return reported - counted > (percent > MISMATCH_MIN_TOKENS ? percent : MISMATCH_MIN_TOKENS);
}
