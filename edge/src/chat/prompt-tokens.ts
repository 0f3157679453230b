import { Piscina } from "piscina";
// Types only: erased at run time, so this module still does not load the tokenizer.
import type * as Tokens from "@mkt/runtime/tokens";

/**
 * Counts prompt tokens for the reservation estimate (DESIGN.md §2): small prompts on the main
 * thread, larger ones in a worker thread, so a long prompt never stalls the event loop that
 * streams everyone else's answers and exports.
 *
 * The tokenizer (gpt-tokenizer's o200k ranks: ~70 MB of RSS on the thread that loads it, ~150 ms
 * to start) is loaded only when needed: on the main thread with the first prompt of at most
 * `inlineMaxBytes` (this module must not import it statically), in the workers with the first
 * larger one. A worker hop costs ~115 µs of CPU per prompt (postMessage both ways, the body parsed
 * again there) and a wake-up of a sleeping thread, against ~5 µs to count a short prompt inline:
 * most chat requests are short, so they stay on the main thread (docs/decisions.md). The pool
 * has `threads` workers (PROMPT_TOKEN_THREADS), started on demand, gone after ten idle minutes.
 */
export class PromptTokenCounter {
  readonly #pool: Piscina<Uint8Array, number>;
  readonly #inlineMaxBytes: number;
  #tokens: Promise<typeof Tokens> | undefined;

  constructor(threads: number, inlineMaxBytes: number) {
    this.#inlineMaxBytes = inlineMaxBytes;
    this.#pool = new Piscina<Uint8Array, number>({
      filename: new URL("./prompt-token-worker.ts", import.meta.url).href,
      minThreads: 0,
      maxThreads: threads,
      idleTimeout: 10 * 60_000,
    });
  }

  /** Prompt tokens of `body`, a serialized chat request whose parsed `messages` are given too. */
  async count(body: Uint8Array, messages: readonly Tokens.ChatMessageLike[]): Promise<number> {
    if (body.length <= this.#inlineMaxBytes) {
      const tokens = await (this.#tokens ??= import("@mkt/runtime/tokens"));
      return tokens.countPromptTokens(messages);
    }
    return this.#pool.run(body);
  }

  /** Worker threads running now (they start with the first prompt larger than the inline limit). */
  get workerThreads(): number {
    return this.#pool.threads.length;
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
