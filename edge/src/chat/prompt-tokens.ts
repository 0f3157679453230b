import { availableParallelism } from "node:os";
import { Piscina } from "piscina";
import { countPromptTokens, type ChatMessageLike } from "@mkt/runtime/tokens";

/**
 * Below this body size a prompt is tokenized inline: it takes well under a millisecond, less than
 * handing it to a worker would. Larger prompts go to worker threads so a big context never stalls
 * the event loop that streams everyone else's answers (DESIGN.md §2).
 */
const INLINE_LIMIT_BYTES = 16 * 1024;

/** Counts prompt tokens for the reservation estimate, off the event loop for large prompts. */
export class PromptTokenCounter {
  readonly #pool = new Piscina<Uint8Array, number>({
    filename: new URL("./prompt-token-worker.ts", import.meta.url).href,
    minThreads: 0,
    maxThreads: Math.max(1, Math.min(4, availableParallelism() - 1)),
    idleTimeout: 30_000,
  });

  /** `body` is the serialized request whose `messages` are `messages`. */
  async count(messages: readonly ChatMessageLike[], body: Uint8Array): Promise<number> {
    if (body.byteLength <= INLINE_LIMIT_BYTES) return countPromptTokens(messages);
    return this.#pool.run(body);
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
