import { countTextTokens, decodeTokens, encodeText } from "@mkt/runtime/tokens";

/**
 * How far past its cap an upstream may run before the relay cuts it (docs/adr/0022-runaway-guard-not-a-cap.md). The upstream
 * is sent `max_tokens` and stops by its own model's tokenizer, which may count fewer tokens than
 * ours (a word-level tokenizer, another BPE); ours is only an estimate of it. So the relay never
 * cuts at the cap itself: it cuts only an upstream that plainly ignores `max_tokens`.
 */
export interface RunawayGuard {
  /** At least 1 (OUTPUT_RUNAWAY_RATIO). */
  ratio: number;
  /** Whole tokens added to ratio × cap (OUTPUT_RUNAWAY_SLACK_TOKENS): room for short answers. */
  slackTokens: number;
}

/** The most tokens (by our count) one choice may relay for an output cap of `cap` tokens. */
export function runawayLimit(cap: bigint | number, guard: RunawayGuard): number {
  return Math.floor(Number(cap) * guard.ratio) + guard.slackTokens;
}

/**
 * The output one choice may relay, in the edge's own BPE tokens: the runaway guard's limit
 * (runawayLimit). Every piece of text relayed passes through `take`, which lets it through whole
 * while it fits and cuts the piece that would go past the limit to the tokens left; after that
 * nothing more is taken. Whatever it lets through, billing charges at most the cap (billedUsage).
 *
 * Counting the whole text again on every piece would cost quadratic time on a long answer, so
 * `take` keeps an upper estimate and counts the whole text exactly only when the estimate would
 * cross the limit. Far from the limit the estimate adds each piece's UTF-8 length, which bounds
 * its tokens (every BPE token is at least one byte) without running the tokenizer: most answers
 * end well under their cap, and a stream then costs one count, at its end, instead of one per
 * chunk. From the first time bytes would cross the limit on, it adds each piece's own token count
 * (a sum that is at least the whole text's count for BPE text, give or take a merge at the
 * joins). An honest upstream reaches the limit once or twice; one that splits its text into tiny
 * pieces causes a recount each time the gap left shrinks, a few dozen at most.
 */
export class OutputBudget {
  readonly limit: number;
  #text = "";
  /** An upper estimate of the tokens in #text: an exact count plus the pieces' bytes or counts since. */
  #estimate = 0;
  /** Pieces are estimated by their bytes until bytes first come near the limit. */
  #byBytes = true;
  /** True once a piece was cut or refused: the caller has all the output it may have. */
  exhausted = false;

  constructor(limit: number) {
    this.limit = Math.max(0, limit);
  }

  /** Everything taken so far, in order. */
  get text(): string {
    return this.#text;
  }

  /** Returns the part of `piece` that may be relayed (all of it, a prefix, or ""). */
  take(piece: string): string {
    if (piece === "") return piece;
    if (this.exhausted) return "";
    if (this.#byBytes) {
      const pieceBytes = Buffer.byteLength(piece, "utf8");
      if (this.#estimate + pieceBytes <= this.limit) {
        this.#text += piece;
        this.#estimate += pieceBytes;
        return piece;
      }
      this.#byBytes = false;
      this.#estimate = countTextTokens(this.#text);
    }
    const pieceTokens = countTextTokens(piece);
    if (this.#estimate + pieceTokens <= this.limit) {
      this.#text += piece;
      this.#estimate += pieceTokens;
      return piece;
    }
    const withPiece = countTextTokens(this.#text + piece);
    if (withPiece <= this.limit) {
      this.#text += piece;
      this.#estimate = withPiece;
      return piece;
    }
    this.exhausted = true;
    const room = this.limit - countTextTokens(this.#text);
    const kept = room > 0 ? prefixOf(piece, decodeTokens(encodeText(piece).slice(0, room))) : "";
    this.#text += kept;
    this.#estimate = countTextTokens(this.#text);
    return kept;
  }
}

/** The part of `piece` that `decoded` reproduces (a token cut inside a character decodes to U+FFFD). */
function prefixOf(piece: string, decoded: string): string {
  let n = 0;
  while (n < decoded.length && n < piece.length && decoded.charCodeAt(n) === piece.charCodeAt(n)) n++;
  return piece.slice(0, n);
}
