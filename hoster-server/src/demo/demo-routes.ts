import { once } from "node:events";
import type { ServerResponse } from "node:http";
import type { FastifyInstance, FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { randomToken } from "@mkt/runtime/ids";
import type { ChatMessageLike } from "@mkt/runtime/tokens";
import { parseChatRequest } from "../chat-request.ts";
import type { ShutdownSignals } from "../shutdown-signals.ts";
import { demoEmbeddings, parseEmbeddingRequest } from "./demo-embeddings.ts";
import { demoReply, type DemoReply } from "./demo-reply.ts";
import { demoUsage } from "./demo-usage.ts";
import { PrefixCache } from "./prefix-cache.ts";

export interface DemoOptions {
  models: readonly string[];
  completionTokens: number;
  /** 0 = no delay. */
  tokensPerSecond: number;
  shutdown: ShutdownSignals;
}

/** The seed text of a prompt: roles and contents, so equal conversations get equal answers. */
function promptKey(messages: readonly ChatMessageLike[]): string {
  return JSON.stringify(messages.map((m) => [m.role, m.content ?? null, m.name ?? null]));
}

/**
 * The pacing of one answer: when each piece is due, and a wait for it that `cut` (the client
 * leaving, shutdown) ends early, after which nothing waits. One abort listener per answer, not one
 * per token: with a thousand streams at 50 tokens/s, adding and removing a listener per sleep was
 * a few percent of the server's CPU.
 */
class Pacer {
  readonly #startedAt = performance.now();
  readonly #tokensPerSecond: number;
  #cut: boolean;
  #wake: (() => void) | undefined;

  constructor(tokensPerSecond: number, cut: AbortSignal) {
    this.#tokensPerSecond = tokensPerSecond;
    this.#cut = cut.aborted;
    const onCut = () => {
      this.#cut = true;
      this.#wake?.();
    };
    cut.addEventListener("abort", onCut, { once: true });
  }

  /** Milliseconds until the piece ending `tokensSoFar` tokens into the answer is due (≤ 0: now). */
  dueIn(tokensSoFar: number): number {
    if (this.#tokensPerSecond <= 0 || this.#cut) return 0;
    return this.#startedAt + (tokensSoFar * 1000) / this.#tokensPerSecond - performance.now();
  }

  async waitFor(tokensSoFar: number): Promise<void> {
    const wait = this.dueIn(tokensSoFar);
    if (wait <= 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, wait);
      this.#wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.#wake = undefined;
  }
}

/** Aborts when the client disconnects before the response is complete. */
function clientGone(res: ServerResponse): AbortSignal {
  const gone = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) gone.abort();
  });
  return gone.signal;
}

/** One delta of one choice, due once that choice has generated `tokensIn` tokens. */
interface ScheduledPiece {
  choice: number;
  delta: object;
  tokensIn: number;
}

/**
 * The pieces of every choice in the order they are generated: the choices run side by side, each
 * at the pace of one answer (as a server generates `n` choices in one batch), so a piece is due
 * when its own choice reaches it.
 */
function schedule(demos: readonly DemoReply[]): ScheduledPiece[] {
  const pieces = demos.flatMap(({ deltas }, choice) => {
    let tokensIn = 0;
    return deltas.map(({ delta, tokens }) => ({ choice, delta, tokensIn: (tokensIn += tokens) }));
  });
  // Stable: at equal times, choices in index order.
  return pieces.sort((a, b) => a.tokensIn - b.tokensIn);
}

async function streamAnswer(
  reply: FastifyReply,
  demos: readonly DemoReply[],
  base: { id: string; object: string; created: number; model: string },
  usage: object | undefined,
  options: DemoOptions,
): Promise<void> {
  const res = reply.raw;
  const gone = clientGone(res);
  const waits = AbortSignal.any([gone, options.shutdown.closing]);
  reply.hijack();
  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
  });
  const write = (chunk: object) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  // Respect backpressure: a slow reader must not make the server buffer the whole answer.
  const drained = () => (res.writableNeedDrain ? once(res, "drain", { signal: gone }) : undefined);
  const send = async (chunk: object) => {
    write(chunk);
    await drained();
  };
  const chunk = (index: number, delta: object, finishReason: string | null) => ({
    ...base,
    choices: [{ index, delta, logprobs: null, finish_reason: finishReason }],
  });
  const pacer = new Pacer(options.tokensPerSecond, waits);
  const pieces = schedule(demos);
  try {
    for (const [index, demo] of demos.entries()) write(chunk(index, demo.opening, null));
    await drained();
    for (let i = 0; i < pieces.length;) {
      await pacer.waitFor(pieces[i]!.tokensIn);
      if (gone.aborted) return; // stop generating for a client that left
      // Every piece due by now is written at once, and Node sends what a response writes in one
      // tick in one system call: a server behind its schedule (a thousand streams on two cores)
      // catches up in one step instead of a write per token. (An explicit res.cork() would undo
      // that: the response then leaves its chunks one write each.)
      do {
        const { choice, delta } = pieces[i]!;
        write(chunk(choice, delta, null));
        i++;
      } while (i < pieces.length && pacer.dueIn(pieces[i]!.tokensIn) <= 0);
      await drained();
    }
    for (const [index, demo] of demos.entries()) write(chunk(index, {}, demo.finishReason));
    await drained();
    if (usage) await send({ ...base, choices: [], usage });
    res.end("data: [DONE]\n\n");
  } catch (err) {
    if (!gone.aborted) reply.log.warn({ err }, "demo stream failed");
    res.destroy();
  }
}

/**
 * GET /v1/models, POST /v1/chat/completions and POST /v1/embeddings of the built-in deterministic
 * demo model. Every model id answers both: which API a model is for is the gateway's catalog's
 * business (its `kind`), not the demo's.
 */
export function demoRoutes(app: FastifyInstance, options: DemoOptions): void {
  const created = Math.floor(Date.now() / 1000);
  const models = new Set(options.models);
  const prefixCache = new PrefixCache();

  app.get("/v1/models", async () => ({
    object: "list",
    data: options.models.map((id) => ({ id, object: "model", created, owned_by: "hoster-server" })),
  }));

  app.post("/v1/embeddings", async (request) => {
    const embedding = parseEmbeddingRequest(request.body);
    if (!models.has(embedding.model)) {
      throw new AppError("model_not_found", `The model '${embedding.model}' does not exist.`, { param: "model" });
    }
    return demoEmbeddings(embedding);
  });

  app.post("/v1/chat/completions", async (request, reply) => {
    const chat = parseChatRequest(request.body);
    if (!models.has(chat.model)) {
      throw new AppError("model_not_found", `The model '${chat.model}' does not exist.`, { param: "model" });
    }
    // Choice 0 is the answer a request without `n` gets; each further choice its own seed.
    const key = promptKey(chat.messages);
    const demos = Array.from({ length: chat.n }, (_, i) =>
      demoReply(chat, i === 0 ? key : `${key}\n#${i}`, options.completionTokens),
    );
    const cachedMessages = prefixCache.lookUpAndRecord(chat.model, chat.messages, chat.toolDefinitions);
    const usage = demoUsage(chat, cachedMessages, demos);
    const id = `chatcmpl-${randomToken(12)}`;
    const now = Math.floor(Date.now() / 1000);

    if (chat.stream) {
      const base = { id, object: "chat.completion.chunk", created: now, model: chat.model };
      await streamAnswer(reply, demos, base, chat.includeUsage ? usage : undefined, options);
      return reply;
    }

    // A non-streaming answer takes as long as generating its longest choice would.
    const gone = clientGone(reply.raw);
    await new Pacer(options.tokensPerSecond, AbortSignal.any([gone, options.shutdown.closing])).waitFor(
      Math.max(...demos.map((d) => d.completionTokens)),
    );
    if (gone.aborted) {
      reply.hijack();
      return reply;
    }
    return {
      id,
      object: "chat.completion",
      created: now,
      model: chat.model,
      choices: demos.map((demo, index) => ({
        index,
        message: demo.message,
        logprobs: null,
        finish_reason: demo.finishReason,
      })),
      usage,
    };
  });
}
