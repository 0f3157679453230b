import { chatToolCalls, chatUsage, firstChoice, isObject, reasoningText, type Json } from "../translation/chat-json.ts";
import type { ResponsesBody } from "./responses-body.ts";
import { customInput, translateTools, type ToolOrigin } from "./tool-translation.ts";

/** What every Response object of one request shares. */
export interface ResponseContext {
  /** `resp_<request id>`: ours, like a chat completion's id. */
  id: string;
  requestId: string;
  createdAt: number;
  /** The model that serves it (the route's model id, as chat completions name it). */
  model: string;
  request: ResponsesBody;
  /** What each chat function name stands for among the request's tools (tool-translation.ts). */
  tools: Map<string, ToolOrigin>;
}

export function responseContext(requestId: string, model: string, request: ResponsesBody): ResponseContext {
  const tools = translateTools(request.tools).origins;
  return { id: `resp_${requestId}`, requestId, createdAt: Math.floor(Date.now() / 1000), model, request, tools };
}

/** Output item ids, unique within the response (by the item's place in `output`; calls by their order). */
export const messageItemId = (ctx: ResponseContext, outputIndex: number) => `msg_${ctx.requestId}_${outputIndex}`;
export const functionCallItemId = (ctx: ResponseContext, index: number) => `fc_${ctx.requestId}_${index}`;
export const reasoningItemId = (ctx: ResponseContext, outputIndex: number) => `rs_${ctx.requestId}_${outputIndex}`;

/**
 * The model's reasoning as a Response output item: its text as the one summary part (an
 * OpenAI-compatible upstream streams its reasoning as text; no encrypted content is kept).
 */
export function reasoningItem(id: string, status: string, text: string | undefined): Json {
  const summary = text === undefined ? [] : [summaryTextPart(text)];
  return { type: "reasoning", id, status, summary };
}

export const summaryTextPart = (text: string): Json => ({ type: "summary_text", text });

/** The request's tool a chat call names (a function of that name when the request has none). */
export const toolOrigin = (ctx: ResponseContext, chatName: string): ToolOrigin =>
  ctx.tools.get(chatName) ?? { kind: "function", name: chatName };

export type ResponseStatus = "in_progress" | "completed" | "incomplete" | "failed";

/**
 * The Response object around `output`, echoing the request's settings as OpenAI does. `store` is
 * false whatever was asked: nothing is stored (request-translation.ts). Fields OpenAI's schema
 * has no null for (`usage`, `user`) are left out when there is nothing to say, rather than null.
 */
export function responseObject(
  ctx: ResponseContext,
  fields: { status: ResponseStatus; output: Json[]; usage?: Json | null; incompleteReason?: string; error?: Json },
): Json {
  const { request } = ctx;
  const response: Json = {
    id: ctx.id,
    object: "response",
    created_at: ctx.createdAt,
    status: fields.status,
    background: false,
    error: fields.error ?? null,
    incomplete_details: fields.incompleteReason ? { reason: fields.incompleteReason } : null,
    instructions: request.instructions ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    metadata: request.metadata ?? {},
    model: ctx.model,
    output: fields.output,
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    temperature: request.temperature ?? 1,
    text: { format: request.text?.format ?? { type: "text" } },
    tool_choice: request.tool_choice ?? "auto",
    tools: (request.tools ?? []).map(echoedTool),
    top_p: request.top_p ?? 1,
    truncation: "disabled",
  };
  if (fields.usage) response.usage = fields.usage;
  if (typeof request.user === "string") response.user = request.user;
  return response;
}

/** A function tool as a Response shows it: `parameters` and `strict` are there, null when not sent. */
function echoedTool(tool: Json & { type: string }): Json {
  if (tool.type !== "function") return tool;
  return { ...tool, parameters: tool.parameters ?? null, strict: tool.strict ?? null };
}

/** Responses usage from a chat usage object (`cost`, where billing adds it, passes on). */
export function responseUsage(relayed: unknown): Json | null {
  const counts = chatUsage(relayed);
  if (!counts) return null;
  const input = counts.promptTokens;
  const output = counts.completionTokens;
  const usage: Json = {
    input_tokens: input,
    // Cached tokens are the upstream's prefix-cache hits (a part of input_tokens); nothing is
    // written to a cache at a price of its own, so there are no cache writes to report.
    input_tokens_details: { cached_tokens: counts.cachedTokens, cache_write_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: counts.reasoningTokens },
    total_tokens: input + output,
  };
  if (counts.cost !== undefined) usage.cost = counts.cost;
  return usage;
}

/** The response's status for a chat finish_reason: cut by the cap or a filter is `incomplete`. */
export function statusOf(finishReason: unknown): { status: ResponseStatus; incompleteReason?: string } {
  if (finishReason === "length") return { status: "incomplete", incompleteReason: "max_output_tokens" };
  if (finishReason === "content_filter") return { status: "incomplete", incompleteReason: "content_filter" };
  return { status: "completed" };
}

export function messageItem(id: string, status: string, content: Json[]): Json {
  return { type: "message", id, status, role: "assistant", content };
}

export const outputTextPart = (text: string): Json => ({ type: "output_text", text, annotations: [], logprobs: [] });
export const refusalPart = (refusal: string): Json => ({ type: "refusal", refusal });

/**
 * A model's tool call as the item type its tool was declared with: a `function_call` (with its
 * namespace, if any), or a `custom_tool_call` whose `input` is the free text the function's one
 * argument carried.
 */
export function toolCallItem(
  id: string,
  status: string,
  origin: ToolOrigin,
  call: { callId: string; arguments: string },
): Json {
  const named = {
    call_id: call.callId,
    ...(origin.namespace ? { namespace: origin.namespace } : {}),
    name: origin.name,
  };
  if (origin.kind === "custom")
    return { type: "custom_tool_call", id, status, ...named, input: customInput(call.arguments) };
  return { type: "function_call", id, ...named, arguments: call.arguments, status };
}

/** The Response object of a non-streamed answer, from the registry's chat.completion. */
export function responseFromCompletion(ctx: ResponseContext, completionText: string): Json {
  const completion = JSON.parse(completionText) as Json;
  const choice = firstChoice(completion);
  const message = isObject(choice.message) ? choice.message : {};
  const { status, incompleteReason } = statusOf(choice.finish_reason);
  const itemStatus = status === "incomplete" ? "incomplete" : "completed";
  const output: Json[] = [];
  const reasoning = reasoningText(message);
  if (reasoning !== "") output.push(reasoningItem(reasoningItemId(ctx, 0), itemStatus, reasoning));
  const calls = chatToolCalls(message);
  const content: Json[] = [];
  if (typeof message.content === "string" && (message.content !== "" || calls.length === 0)) {
    content.push(outputTextPart(message.content));
  }
  if (typeof message.refusal === "string" && message.refusal !== "") content.push(refusalPart(message.refusal));
  if (content.length > 0) output.push(messageItem(messageItemId(ctx, output.length), itemStatus, content));
  calls.forEach((call, i) => {
    output.push(
      toolCallItem(functionCallItemId(ctx, i), itemStatus, toolOrigin(ctx, call.name), {
        callId: call.id,
        arguments: call.arguments,
      }),
    );
  });
  return responseObject(ctx, { status, output, usage: responseUsage(completion.usage), incompleteReason });
}
