import { chatToolCalls, chatUsage, firstChoice, reasoningText, type Json } from "../translation/chat-json.ts";
import type { MessagesBody } from "./messages-body.ts";

/** What every Message object of one request shares. */
export interface MessageContext {
  /** `msg_<request id>`: ours, like a chat completion's id. */
  id: string;
  /** The model that serves it (the route's model id, as chat completions name it). */
  model: string;
  /**
   * The client turned thinking on (`thinking` enabled or adaptive): the upstream's reasoning is
   * sent as `thinking` blocks. Otherwise it is left out, as Anthropic sends none then.
   */
  thinking: boolean;
}

export const messageContext = (requestId: string, model: string, thinking = false): MessageContext => ({
  id: `msg_${requestId}`,
  model,
  thinking,
});

/** Whether a request turned thinking on: `thinking` of type `enabled` or `adaptive`. */
export function thinkingOn(body: MessagesBody): boolean {
  const type = body.thinking?.type;
  return type === "enabled" || type === "adaptive";
}

/**
 * A `thinking` block. Anthropic signs its own thinking so it can be sent back; an upstream's
 * reasoning has no signature, and a thinking block sent back is not resumed (request-translation.ts).
 */
export const thinkingBlock = (thinking: string): Json => ({ type: "thinking", thinking, signature: "" });

/**
 * Anthropic's stop_reason for a chat finish_reason. A chat answer never names the stop sequence
 * it matched, so one stopped by a sequence reads `end_turn`, as Anthropic's own `stop_sequence`
 * needs the matched string.
 */
export function stopReasonOf(finishReason: unknown): string | null {
  switch (finishReason) {
    case "stop":
      return "end_turn";
    case "length":
      return "max_tokens";
    case "tool_calls":
    case "function_call":
      return "tool_use";
    case "content_filter":
      return "refusal";
    case undefined:
    case null:
      return null;
    default:
      return "end_turn";
  }
}

/**
 * Anthropic usage from the relay's chat usage, in Anthropic's meaning: `input_tokens` counts only
 * the fresh part of the prompt and `cache_read_input_tokens` the part the upstream served from its
 * prefix cache (every other API counts cached tokens within its input count). Nothing is written to
 * a cache at a price of its own, so there are no cache writes; `cost` is what the request is
 * charged in USD, as on chat completions.
 */
export function messageUsage(relayed: unknown): Json {
  const counts = chatUsage(relayed);
  const prompt = counts?.promptTokens ?? 0;
  const cached = Math.min(counts?.cachedTokens ?? 0, prompt);
  const usage: Json = {
    input_tokens: prompt - cached,
    output_tokens: counts?.completionTokens ?? 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
  };
  if (counts?.cost !== undefined) usage.cost = counts.cost;
  return usage;
}

/** A tool call's arguments as the `input` object Anthropic's clients expect. */
export function toolInput(args: string): unknown {
  if (args.trim() === "") return {};
  try {
    return JSON.parse(args);
  } catch {
    // Cut by max_tokens mid-JSON: stop_reason says so; the block still has an object.
    return {};
  }
}

export function messageObject(
  ctx: MessageContext,
  fields: { content: Json[]; stopReason: string | null; usage: Json },
) {
  return {
    id: ctx.id,
    type: "message",
    role: "assistant",
    model: ctx.model,
    content: fields.content,
    stop_reason: fields.stopReason,
    stop_sequence: null,
    usage: fields.usage,
  };
}

/** The Message of a non-streamed answer, from the relay's chat.completion. */
export function messageFromCompletion(ctx: MessageContext, completionText: string): Json {
  const completion = JSON.parse(completionText) as Json;
  const choice = firstChoice(completion);
  const message = (choice.message ?? {}) as Json;
  const content: Json[] = [];
  const reasoning = ctx.thinking ? reasoningText(message) : "";
  if (reasoning !== "") content.push(thinkingBlock(reasoning));
  const text = [message.content, message.refusal].filter((t) => typeof t === "string" && t !== "").join("");
  if (text !== "") content.push({ type: "text", text });
  for (const call of chatToolCalls(message)) {
    content.push({ type: "tool_use", id: call.id, name: call.name, input: toolInput(call.arguments) });
  }
  return messageObject(ctx, {
    content,
    stopReason: stopReasonOf(choice.finish_reason),
    usage: messageUsage(completion.usage),
  });
}
