/**
 * The chunks of a streamed answer the edge has relayed to its client, kept (copied into one
 * buffer per answer, never parsed on the relay's path) only so that an answer registry's failure
 * cuts can be billed what its client received (cut-answers.ts): registry, which meters every
 * answer, died with it. A copy, not the chunks themselves: each is a view into the gRPC message
 * (or read) buffer it came in, which a kept view would keep alive whole.
 *
 * At most RETAIN_BYTES are kept; past that the count covers the first RETAIN_BYTES only, so an
 * answer is never billed more than was relayed (a longer one is billed less).
 */
export const RETAIN_BYTES = 1 << 20;
/** The first buffer's size (then doubling): most answers fit, and this size is never pooled. */
const FIRST_BYTES = 4_096;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => !!v && typeof v === "object" && !Array.isArray(v);
const text = (v: unknown): string => (typeof v === "string" ? v : "");

export class RelayedOutput {
  #buffer: Buffer | undefined;
  #bytes = 0;
  /** Where each chunk ends in #buffer. */
  readonly #ends: number[] = [];

  /** Chunks relayed to the client, in order (registry's `chunk` or `chunks` event). */
  add(chunks: readonly Uint8Array[]): void {
    for (const chunk of chunks) {
      const end = this.#bytes + chunk.length;
      if (end > RETAIN_BYTES) return;
      if (!this.#buffer || end > this.#buffer.length) {
        let size = this.#buffer ? this.#buffer.length * 2 : FIRST_BYTES;
        while (size < end) size *= 2;
        const grown = Buffer.allocUnsafe(Math.min(size, RETAIN_BYTES));
        this.#buffer?.copy(grown, 0, 0, this.#bytes);
        this.#buffer = grown;
      }
      this.#buffer.set(chunk, this.#bytes);
      this.#bytes = end;
      this.#ends.push(end);
    }
  }

  get empty(): boolean {
    return this.#ends.length === 0;
  }

  /** The `model` of the first chunk: which of the request's routes answered. */
  model(): string | undefined {
    const first = this.#parsed().next().value;
    return first && typeof first.model === "string" ? first.model : undefined;
  }

  /**
   * The output tokens relayed, each choice counted on its own as registry counts a delivered
   * answer (chunk-accumulator.ts: content, refusal, reasoning, tool and function calls' names and
   * arguments, an audio transcript), at most `cap`. Counting stops at the cap, so a long answer
   * costs no more than the tokens it can be billed.
   */
  outputTokens(cap: bigint, countText: (text: string, limit: number) => number): bigint {
    const perChoice = new Map<number, string[]>();
    for (const chunk of this.#parsed()) {
      if (!Array.isArray(chunk.choices)) continue;
      for (const choice of chunk.choices as unknown[]) {
        if (!isObject(choice) || !isObject(choice.delta)) continue;
        const index = typeof choice.index === "number" ? choice.index : 0;
        const pieces = perChoice.get(index) ?? [];
        perChoice.set(index, pieces);
        pieces.push(...deltaTexts(choice.delta));
      }
    }
    let total = 0n;
    for (const pieces of perChoice.values()) {
      if (total >= cap) break;
      total += BigInt(countText(pieces.join(""), Number(cap - total)));
    }
    return total < cap ? total : cap;
  }

  *#parsed(): Generator<Json> {
    let start = 0;
    for (const end of this.#ends) {
      try {
        const parsed: unknown = JSON.parse(this.#buffer!.toString("utf8", start, end));
        if (isObject(parsed)) yield parsed;
      } catch {
        // registry sends JSON objects only; anything else counts for nothing
      }
      start = end;
    }
  }
}

/** The output text of one choice's delta, in the order chunk-accumulator.ts takes it. */
function deltaTexts(delta: Json): string[] {
  const texts = [text(delta.content), text(delta.refusal), text(delta.reasoning_content), text(delta.reasoning)];
  if (isObject(delta.function_call)) texts.push(text(delta.function_call.name), text(delta.function_call.arguments));
  if (isObject(delta.audio)) texts.push(text(delta.audio.transcript));
  if (Array.isArray(delta.tool_calls)) {
    for (const call of delta.tool_calls as unknown[]) {
      if (isObject(call) && isObject(call.function))
        texts.push(text(call.function.name), text(call.function.arguments));
    }
  }
  return texts;
}
