import { once } from "node:events";
import type { ServerResponse } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import type { FastifyInstance, FastifyReply } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { randomToken } from "@mkt/runtime/ids";
import { countPromptTokens, countTextTokens, type ChatMessageLike } from "@mkt/runtime/tokens";
import { parseChatRequest } from "../chat-request.ts";
import type { ShutdownSignals } from "../shutdown-signals.ts";
import { demoAnswer, type DemoAnswer } from "./demo-text.ts";

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
 * Waits out the pacing of a piece that ends `tokensSoFar` tokens into the answer. Returns false
 * when the client went away. Shutdown ends the wait early: the rest is sent without delay.
 */
async function pace(startedAt: number, tokensSoFar: number, tokensPerSecond: number, signal: AbortSignal) {
  if (tokensPerSecond <= 0 || signal.aborted) return;
  const wait = startedAt + (tokensSoFar * 1000) / tokensPerSecond - performance.now();
  if (wait > 0) await sleep(wait, undefined, { signal }).catch(() => undefined);
}

/** Aborts when the client disconnects before the response is complete. */
function clientGone(res: ServerResponse): AbortSignal {
  const gone = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) gone.abort();
  });
  return gone.signal;
}

async function streamAnswer(
  reply: FastifyReply,
  answer: DemoAnswer,
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
  const send = async (chunk: object) => {
    // Respect backpressure: a slow reader must not make the server buffer the whole answer.
    if (!res.write(`data: ${JSON.stringify(chunk)}\n\n`)) await once(res, "drain", { signal: gone });
  };
  const chunk = (delta: object, finishReason: string | null) => ({
    ...base,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  });
  const startedAt = performance.now();
  try {
    await send(chunk({ role: "assistant", content: "" }, null));
    let tokens = 0;
    for (const [i, piece] of answer.pieces.entries()) {
      tokens += answer.pieceTokens[i]!;
      await pace(startedAt, tokens, options.tokensPerSecond, waits);
      if (gone.aborted) return; // stop generating for a client that left
      await send(chunk({ content: piece }, null));
    }
    await send(chunk({}, answer.finishReason));
    if (usage) await send({ ...base, choices: [], usage });
    res.end("data: [DONE]\n\n");
  } catch (err) {
    if (!gone.aborted) reply.log.warn({ err }, "demo stream failed");
    res.destroy();
  }
}

/** GET /v1/models and POST /v1/chat/completions of the built-in deterministic demo model. */
export function demoRoutes(app: FastifyInstance, options: DemoOptions): void {
  const created = Math.floor(Date.now() / 1000);
  const models = new Set(options.models);

  app.get("/v1/models", async () => ({
    object: "list",
    data: options.models.map((id) => ({ id, object: "model", created, owned_by: "hoster-server" })),
  }));

  app.post("/v1/chat/completions", async (request, reply) => {
    const chat = parseChatRequest(request.body);
    if (!models.has(chat.model)) {
      throw new AppError("model_not_found", `The model '${chat.model}' does not exist.`, { param: "model" });
    }
    const answer = demoAnswer(promptKey(chat.messages), options.completionTokens, chat.maxTokens);
    const promptTokens = countPromptTokens(chat.messages);
    const completionTokens = countTextTokens(answer.text);
    const usage = {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    };
    const id = `chatcmpl-${randomToken(12)}`;
    const now = Math.floor(Date.now() / 1000);

    if (chat.stream) {
      const base = { id, object: "chat.completion.chunk", created: now, model: chat.model };
      await streamAnswer(reply, answer, base, chat.includeUsage ? usage : undefined, options);
      return reply;
    }

    // A non-streaming answer takes as long as generating it would.
    const gone = clientGone(reply.raw);
    await pace(
      performance.now(),
      completionTokens,
      options.tokensPerSecond,
      AbortSignal.any([gone, options.shutdown.closing]),
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
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: answer.text, refusal: null },
          logprobs: null,
          finish_reason: answer.finishReason,
        },
      ],
      usage,
    };
  });
}
