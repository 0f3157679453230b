import { countTokens, decode, encode } from "gpt-tokenizer";
import { promptParts, TOKENS_PER_MESSAGE, TOKENS_PER_REPLY, type ChatMessageLike } from "./token-bounds.ts";

export type { ChatMessageLike } from "./token-bounds.ts";

// Text that spells a special token (`<|endoftext|>`) is counted as the ordinary text it is, as
// OpenAI counts user content; gpt-tokenizer would throw on it by default.
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * BPE merges within one pre-token (a run of letters, of punctuation or of whitespace) cost time
 * quadratic in its length: 80,000 characters of base64 took 2 s whole. Runs longer than this are
 * counted in pieces of this length, which keeps the cost per byte flat (bench: `npm run
 * bench:tokenizer`) and adds at most one token per piece, to text no language writes.
 */
const RUN_CHARS = 512;
/** Text is counted in pieces of about this many characters, so counting can stop at a limit. */
const PIECE_CHARS = 65_536;

const isWhitespace = (code: number) => code === 32 || (code >= 9 && code <= 13) || code === 0xa0 || code === 0x3000;
const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff;

/**
 * Splits a text where the tokenizer's own pre-tokens split it anyway: a long text before the
 * whitespace that starts a word, and a run of one kind (whitespace or not) every RUN_CHARS,
 * never inside a surrogate pair. Ordinary prose is cut only at word starts, which leaves its
 * count unchanged.
 */
export function* tokenizerPieces(text: string): Generator<string> {
  let start = 0;
  let run = 0;
  let runIsSpace = false;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const space = isWhitespace(code);
    if (space !== runIsSpace) {
      if (space && i - start >= PIECE_CHARS) {
        yield text.slice(start, i);
        start = i;
      }
      runIsSpace = space;
      run = 0;
    }
    if (++run > RUN_CHARS && !isLowSurrogate(code)) {
      yield text.slice(start, i);
      start = i;
      run = 1;
    }
  }
  if (start < text.length) yield text.slice(start);
}

/**
 * Tokens in a text, with the o200k BPE encoding, in time linear in its length. Counting stops
 * once the count passes `limit`: the result is then some number above it.
 */
export function countTextTokens(text: string, limit = Infinity): number {
  if (text.length === 0) return 0;
  if (text.length <= RUN_CHARS) return countTokens(text, PLAIN_TEXT);
  let total = 0;
  for (const piece of tokenizerPieces(text)) {
    total += countTokens(piece, PLAIN_TEXT);
    if (total > limit) break;
  }
  return total;
}

/** The o200k token ids of a text (special-token spellings as plain text, as in countTextTokens). */
export function encodeText(text: string): number[] {
  return encode(text, PLAIN_TEXT);
}

/**
 * gpt-tokenizer decodes with one streaming TextDecoder shared by the whole process and never
 * flushes it: the bytes of a character cut at the end of one call stay pending and come out as
 * U+FFFD at the start of the next call's text, whoever makes it. A complete character made of
 * byte tokens only (an emoji: o200k has no token for it whole) decoded before and after the ids
 * pushes out what another caller left pending and what these leave, so the decoder is clean on
 * both sides; both copies are then cut off the text.
 */
const FLUSH = "👩";
const FLUSH_TOKENS = encode(FLUSH, PLAIN_TEXT);

/** The text of o200k token ids (a cut inside a character decodes to U+FFFD, and nothing is left pending). */
export function decodeTokens(tokens: readonly number[]): string {
  const text = decode([...FLUSH_TOKENS, ...tokens, ...FLUSH_TOKENS]);
  // What another caller left pending comes out as U+FFFD before the first copy.
  return text.slice(text.indexOf(FLUSH) + FLUSH.length, text.length - FLUSH.length);
}

/**
 * Prompt tokens of a chat request: its messages and its tool definitions. The gateway and the
 * reference hoster server both count with this function, so a well-behaved upstream's report and
 * the gateway's own count agree. Counting stops once the total passes `limit` (the largest
 * context the prompt could be served with): the result is then some number above it, and the
 * prompt is refused anyway.
 */
export function countPromptTokens(
  messages: readonly ChatMessageLike[],
  options: { limit?: number; tools?: unknown } = {},
): number {
  const limit = options.limit ?? Infinity;
  let total = TOKENS_PER_REPLY;
  for (const texts of promptParts(messages, options.tools)) {
    total += TOKENS_PER_MESSAGE;
    for (const text of texts) {
      total += countTextTokens(text, limit - total);
      if (total > limit) return total;
    }
  }
  return total;
}
