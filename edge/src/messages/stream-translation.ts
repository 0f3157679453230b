import type { AppError } from "@mkt/runtime/errors";
import type { AnswerFormat } from "../chat/answer-format.ts";
import { firstChunkChoice, isObject, reasoningText, type Json } from "../translation/chat-json.ts";
import { anthropicErrorBody } from "./anthropic-errors.ts";
import {
  messageFromCompletion,
  messageObject,
  messageUsage,
  stopReasonOf,
  thinkingBlock,
  type MessageContext,
} from "./message-object.ts";

/** The content block being streamed: thinking, text, or one tool call by its chat index. */
type OpenBlock = { kind: "thinking" } | { kind: "text" } | { kind: "tool_use"; chatIndex: number };

/**
 * Anthropic's Messages stream, from the relay's chat.completion.chunks: `message_start` and a
 * `ping` with the first chunk; then one content block per text run or tool call
 * (`content_block_start`, `content_block_delta`s of `thinking_delta` (the upstream's reasoning,
 * when the client turned thinking on), `text_delta` or `input_json_delta`,
 * `content_block_stop` when the next block begins or the answer ends); then `message_delta` with
 * the stop_reason and usage (with `cost`), and `message_stop`. A failure after the start is
 * Anthropic's `error` event, never a silent end.
 *
 * Only the first choice is read: the translated request never asks for more.
 */
export class MessageStreamTranslator implements AnswerFormat {
  readonly #ctx: MessageContext;
  #started = false;
  /** Blocks opened so far: the open one is the last. */
  #blocks = 0;
  #open: OpenBlock | undefined;
  #finishReason: unknown;
  #usage: unknown;

  constructor(ctx: MessageContext) {
    this.#ctx = ctx;
  }

  completion(completion: string): string {
    return JSON.stringify(messageFromCompletion(this.#ctx, completion));
  }

  chunks(chunks: readonly string[]): string {
    let frames = this.#start();
    for (const text of chunks) frames += this.#chunk(JSON.parse(text));
    return frames;
  }

  end(): string {
    const frames = this.#start() + this.#close();
    const usage = messageUsage(this.#usage);
    const delta = { stop_reason: stopReasonOf(this.#finishReason ?? "stop"), stop_sequence: null };
    return frames + event("message_delta", { delta, usage }) + event("message_stop", {});
  }

  failure(error: AppError): string {
    return event("error", { error: anthropicErrorBody(error).error });
  }

  #start(): string {
    if (this.#started) return "";
    this.#started = true;
    const message = messageObject(this.#ctx, { content: [], stopReason: null, usage: messageUsage(undefined) });
    return event("message_start", { message }) + event("ping", {});
  }

  #chunk(chunk: unknown): string {
    if (!isObject(chunk)) return "";
    if (isObject(chunk.usage)) this.#usage = chunk.usage;
    const choice = firstChunkChoice(chunk);
    if (!choice) return "";
    if (typeof choice.finish_reason === "string") this.#finishReason = choice.finish_reason;
    const delta = isObject(choice.delta) ? choice.delta : {};
    let frames = "";
    const reasoning = this.#ctx.thinking ? reasoningText(delta) : "";
    if (reasoning !== "") frames += this.#thinking(reasoning);
    for (const text of [delta.content, delta.refusal]) {
      if (typeof text === "string" && text !== "") frames += this.#text(text);
    }
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) if (isObject(call)) frames += this.#toolCall(call);
    }
    return frames;
  }

  #thinking(thinking: string): string {
    let frames = "";
    if (this.#open?.kind !== "thinking") {
      frames += this.#close() + this.#openBlock({ kind: "thinking" }, thinkingBlock(""));
    }
    const delta = { type: "thinking_delta", thinking };
    return frames + event("content_block_delta", { index: this.#blocks - 1, delta });
  }

  #text(text: string): string {
    let frames = "";
    if (this.#open?.kind !== "text") {
      frames += this.#close() + this.#openBlock({ kind: "text" }, { type: "text", text: "" });
    }
    return frames + event("content_block_delta", { index: this.#blocks - 1, delta: { type: "text_delta", text } });
  }

  #toolCall(delta: Json): string {
    const fn = isObject(delta.function) ? delta.function : {};
    const chatIndex = typeof delta.index === "number" ? delta.index : 0;
    let frames = "";
    const open = this.#open;
    if (open?.kind !== "tool_use" || open.chatIndex !== chatIndex) {
      const block = {
        type: "tool_use",
        id: typeof delta.id === "string" ? delta.id : "",
        name: typeof fn.name === "string" ? fn.name : "",
        input: {},
      };
      frames += this.#close() + this.#openBlock({ kind: "tool_use", chatIndex }, block);
    }
    if (typeof fn.arguments === "string" && fn.arguments !== "") {
      const json = { type: "input_json_delta", partial_json: fn.arguments };
      frames += event("content_block_delta", { index: this.#blocks - 1, delta: json });
    }
    return frames;
  }

  #openBlock(open: OpenBlock, block: Json): string {
    this.#open = open;
    return event("content_block_start", { index: this.#blocks++, content_block: block });
  }

  #close(): string {
    if (!this.#open) return "";
    this.#open = undefined;
    return event("content_block_stop", { index: this.#blocks - 1 });
  }
}

/** One server-sent event as Anthropic frames it: its type named twice, in `event:` and in the data. */
function event(type: string, fields: Json): string {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
}
