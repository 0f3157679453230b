import { countTextTokens } from "@mkt/runtime/tokens";
import { demoAnswer, type DemoAnswer } from "./demo-text.ts";

/**
 * The reasoning sentence's close. A newline is a pre-token of its own for the tokenizer, so the
 * answer that follows never merges with the reasoning into one token: the relay, which counts a
 * choice's reasoning and answer as one text, then counts exactly reasoning + answer tokens.
 */
const CLOSE = ".\n";
const CLOSE_TOKENS = countTextTokens(CLOSE);

/** Tokens of the demo's reasoning: a short sentence, so a test sees it without waiting for it. */
export const REASONING_TOKENS = 20;

/**
 * The demo model's reasoning for the answer seeded by `seed`: a sentence of demo words, drawn from
 * a seed of its own so the answer stays the one the request without reasoning gets. `maxTokens`
 * bounds it as it bounds the whole output: finish_reason "length" means the reasoning filled the
 * cap and leaves no room for an answer.
 */
export function demoReasoning(seed: string, maxTokens?: number): DemoAnswer {
  const words = demoAnswer(`${seed}\nreasoning`, REASONING_TOKENS - CLOSE_TOKENS, maxTokens);
  if (maxTokens !== undefined && maxTokens < REASONING_TOKENS) return { ...words, finishReason: "length" };
  return {
    pieces: [...words.pieces, CLOSE],
    pieceTokens: [...words.pieceTokens, CLOSE_TOKENS],
    text: words.text + CLOSE,
    finishReason: "stop",
  };
}
