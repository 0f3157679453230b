import { Piscina } from "piscina";

/**
 * Counts prompt tokens for the reservation estimate, always in a worker thread (DESIGN.md §2: a
 * large prompt must not stall the event loop that streams everyone else's answers and exports).
 *
 * The tokenizer lives only in the workers. Each copy of gpt-tokenizer's o200k ranks is a worker
 * of about 85 MB of RSS that takes some 150 ms to start, so the main thread holds none (this
 * module must not import it) and the pool has `threads` copies, not one per core
 * (PROMPT_TOKEN_THREADS). Workers start on the first prompt and leave after ten idle minutes: an
 * edge serving chat keeps its tokenizer loaded, one that serves none gives the memory back. A
 * prompt pays the hop to the worker, about 30–70 µs (docs/decisions.md).
 */
export class PromptTokenCounter {
  readonly #pool: Piscina<Uint8Array, number>;

  constructor(threads: number) {
    this.#pool = new Piscina<Uint8Array, number>({
      filename: new URL("./prompt-token-worker.ts", import.meta.url).href,
      minThreads: 0,
      maxThreads: threads,
      idleTimeout: 10 * 60_000,
    });
  }

  /** Prompt tokens of `body`, a serialized chat request (its `messages`). */
  async count(body: Uint8Array): Promise<number> {
    return this.#pool.run(body);
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
