import { Piscina } from "piscina";
import { AppError } from "@mkt/runtime/errors";
import { minimumPromptTokens, type ChatMessageLike } from "@mkt/runtime/token-bounds";
// Types only: erased at run time, so this module still does not load the tokenizer.
import type * as Tokens from "@mkt/runtime/tokens";
import { AccountLines } from "./account-lines.ts";
import type { PromptJob } from "./prompt-token-worker.ts";

export interface PromptTokenSettings {
  /** Worker threads (PROMPT_TOKEN_THREADS). */
  threads: number;
  /** Bodies up to this size are counted on the main thread (PROMPT_TOKEN_INLINE_BYTES). */
  inlineMaxBytes: number;
  /** Longest a prompt may wait for and spend in a worker (PROMPT_TOKEN_DEADLINE_MS). */
  deadlineMs: number;
  /** Prompts of one account waiting behind its counting one (PROMPT_TOKEN_ACCOUNT_QUEUE). */
  accountQueue: number;
}

export interface PromptToCount {
  accountId: string;
  /** The serialized chat request (what a worker parses). */
  body: Uint8Array;
  messages: readonly ChatMessageLike[];
  /** The request's tool definitions (`tools`): prompt text too. */
  tools?: unknown;
  /** The largest context the prompt could be served with: counting stops past it. */
  limit: number;
}

/**
 * Counts prompt tokens for admission, with the work bounded before it is spent
 * (docs/adr/0024-bounded-prompt-work.md), so one tenant's large prompts never slow another's:
 *
 * - a prompt that could not fit `limit` even if every token were the vocabulary's longest is
 *   refused by its length alone, before any tokenizing;
 * - counting is linear in the text (runs without breaks are counted in pieces, see tokens.ts) and
 *   stops once the count passes `limit`;
 * - small bodies are counted on the main thread (~5 µs for a short prompt, against ~115 µs of CPU
 *   for a worker hop: docs/adr/0024-bounded-prompt-work.md), larger ones in `threads` workers, each account with one
 *   prompt inside the pool at a time and at most `accountQueue` waiting behind it;
 * - a prompt not counted within `deadlineMs` (waiting included) is answered 503, and a worker
 *   still counting it is stopped.
 *
 * The tokenizer (gpt-tokenizer's o200k ranks: ~70 MB of RSS on the thread that loads it, ~150 ms
 * to start) is loaded only when needed: on the main thread with the first small prompt (this
 * module must not import it statically), in the workers with the first larger one. Workers start
 * on demand and stop after ten idle minutes.
 *
 * Returns the count, or some number above `limit` when the prompt cannot fit it.
 */
export class PromptTokenCounter {
  readonly #pool: Piscina<PromptJob, number>;
  readonly #settings: PromptTokenSettings;
  readonly #lines: AccountLines;
  #tokens: Promise<typeof Tokens> | undefined;

  constructor(settings: PromptTokenSettings) {
    this.#settings = settings;
    this.#lines = new AccountLines(settings.accountQueue);
    this.#pool = new Piscina<PromptJob, number>({
      filename: new URL("./prompt-token-worker.ts", import.meta.url).href,
      minThreads: 0,
      maxThreads: settings.threads,
      idleTimeout: 10 * 60_000,
    });
  }

  async count(prompt: PromptToCount): Promise<number> {
    const lowerBound = minimumPromptTokens(prompt.messages, prompt.tools);
    if (lowerBound > prompt.limit) return lowerBound;
    if (prompt.body.length <= this.#settings.inlineMaxBytes) {
      const tokens = await (this.#tokens ??= import("@mkt/runtime/tokens"));
      return tokens.countPromptTokens(prompt.messages, { limit: prompt.limit, tools: prompt.tools });
    }
    const signal = AbortSignal.timeout(this.#settings.deadlineMs);
    try {
      return await this.#lines.run(
        prompt.accountId,
        () => this.#pool.run({ body: prompt.body, limit: prompt.limit }, { signal }),
        signal,
      );
    } catch (err) {
      if (!signal.aborted) throw err;
      throw new AppError("service_unavailable", "The gateway is busy counting prompts; retry shortly.", {
        headers: { "retry-after": "1" },
        cause: err,
      });
    }
  }

  /** Worker threads running now (they start with the first prompt larger than the inline limit). */
  get workerThreads(): number {
    return this.#pool.threads.length;
  }

  async close(): Promise<void> {
    await this.#pool.destroy();
  }
}
