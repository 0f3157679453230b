import { countTextTokens, decodeTokens, encodeText } from "@mkt/runtime/tokens";

/**
 * The output a caller may receive, in the tokens billing counts (DESIGN.md §5: the registry's own
 * BPE count), enforced whatever the upstream does with `max_tokens`. Every piece of text relayed
 * passes through `take`, which lets it through whole while it fits and cuts the piece that would
 * go past the limit to the tokens left; after that nothing more is taken.
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
