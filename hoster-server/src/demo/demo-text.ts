import { createHash } from "node:crypto";
import { countTextTokens, decodeTokens, encodeText } from "@mkt/runtime/tokens";

/**
 * Common English words, each one BPE token with its leading space, so an answer's token count
 * is the sum of its words' counts (the tokenizer splits on the spaces) and can hit a target
 * exactly.
 */
const WORDS = (
  "the model is a small demo that writes plain words for tests and each answer comes from the same seed so it stays stable when you ask again with this prompt text " +
  "data will be sent over one stream at an even pace until limit or end has been reached here now we can see how many tokens are used by every request made"
).split(" ");

/** A generated answer, split into the pieces a stream sends one by one. */
export interface DemoAnswer {
  /** Pieces of the answer in order; joined they are `text`. */
  pieces: string[];
  /** BPE tokens of each piece (for pacing). */
  pieceTokens: number[];
  text: string;
  finishReason: "stop" | "length";
}

/** mulberry32: a tiny deterministic PRNG; quality is irrelevant, reproducibility is the point. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const tokenCache = new Map<string, number>();
function tokensOf(piece: string): number {
  let n = tokenCache.get(piece);
  if (n === undefined) {
    n = countTextTokens(piece);
    tokenCache.set(piece, n);
  }
  return n;
}

/** A PRNG seeded by a hash of `prompt`: equal prompts draw equal answers. */
export function promptRandom(prompt: string): () => number {
  return prng(createHash("sha256").update(prompt).digest().readUInt32BE(0));
}

/**
 * A fixed text (a JSON document, tool arguments) as an answer: one piece per BPE token, so a
 * stream sends it token by token and `maxTokens` cuts it at exactly that many tokens, as a model
 * that runs into its cap does (the cut text is then not valid JSON, as OpenAI's is not either).
 */
export function answerFromText(text: string, maxTokens?: number): DemoAnswer {
  const tokens = encodeText(text);
  const cutByMax = maxTokens !== undefined && maxTokens < tokens.length;
  const kept = cutByMax ? tokens.slice(0, maxTokens) : tokens;
  const pieces: string[] = [];
  const pieceTokens: number[] = [];
  for (let start = 0, end = 1; end <= kept.length; end++) {
    const piece = decodeTokens(kept.slice(start, end));
    // A token that ends inside a character waits for the rest of it.
    if (piece.endsWith("\uFFFD") && end < kept.length) continue;
    pieces.push(piece);
    pieceTokens.push(end - start);
    start = end;
  }
  return { pieces, pieceTokens, text: pieces.join(""), finishReason: cutByMax ? "length" : "stop" };
}

/**
 * The demo model's answer to `prompt`: `targetTokens` tokens of words drawn from a fixed list,
 * seeded by a hash of the prompt, and never more than `maxTokens`. finish_reason is "length"
 * when `maxTokens` cut the answer short, "stop" otherwise.
 */
export function demoAnswer(prompt: string, targetTokens: number, maxTokens?: number): DemoAnswer {
  const cutByMax = maxTokens !== undefined && maxTokens < targetTokens;
  const limit = cutByMax ? maxTokens : targetTokens;
  const random = promptRandom(prompt);
  const pieces: string[] = [];
  const pieceTokens: number[] = [];
  let used = 0;
  for (;;) {
    const word = WORDS[Math.floor(random() * WORDS.length)]!;
    const piece = pieces.length === 0 ? word : ` ${word}`;
    const n = tokensOf(piece);
    // Stop before the limit would be exceeded.
    if (used + n > limit) break;
    pieces.push(piece);
    pieceTokens.push(n);
    used += n;
  }
  return { pieces, pieceTokens, text: pieces.join(""), finishReason: cutByMax ? "length" : "stop" };
}
