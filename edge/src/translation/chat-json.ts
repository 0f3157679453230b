import { AppError } from "@mkt/runtime/errors";

/**
 * What every translation of another API onto the chat path (the Responses API, Anthropic's
 * Messages API) reads and refuses the same way: JSON objects as they come, a 400 naming the field
 * at fault, and the first choice and usage of the chat answers the relay always speaks.
 */
export type Json = Record<string, unknown>;

export const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** A 400 `invalid_request` naming the request field at fault. */
export function badField(param: string, message: string): AppError {
  return new AppError("invalid_request", message, { param });
}

export function requiredString(holder: Json, field: string, param: string): string {
  const value = holder[field];
  if (typeof value !== "string") throw badField(`${param}.${field}`, `${param}.${field} must be a string.`);
  return value;
}

/** The first choice of a `chat.completion` (the translated requests never ask for more). */
export function firstChoice(completion: Json): Json {
  return Array.isArray(completion.choices) && isObject(completion.choices[0]) ? completion.choices[0] : {};
}

/** The choice with index 0 of a `chat.completion.chunk`, if the chunk has one. */
export function firstChunkChoice(chunk: Json): Json | undefined {
  if (!Array.isArray(chunk.choices)) return undefined;
  const choice: unknown = chunk.choices.find((c) => isObject(c) && (c.index ?? 0) === 0);
  return isObject(choice) ? choice : undefined;
}

/**
 * A chat answer's token counts (the relay's billed usage: cached tokens a part of the prompt's,
 * reasoning tokens a part of the completion's) and, where billing priced it, its `cost` in USD.
 */
export interface ChatUsage {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
  cost: unknown;
}

export function chatUsage(usage: unknown): ChatUsage | undefined {
  if (!isObject(usage)) return undefined;
  const detail = (field: string, count: string) => {
    const holder = usage[field];
    return isObject(holder) ? Number(holder[count] ?? 0) : 0;
  };
  return {
    promptTokens: Number(usage.prompt_tokens ?? 0),
    completionTokens: Number(usage.completion_tokens ?? 0),
    cachedTokens: detail("prompt_tokens_details", "cached_tokens"),
    reasoningTokens: detail("completion_tokens_details", "reasoning_tokens"),
    cost: usage.cost,
  };
}

/** Delta fields in which reasoning models (DeepSeek, vLLM, OpenRouter) send their reasoning. */
export const REASONING_FIELDS = ["reasoning_content", "reasoning"] as const;

/** A chat delta's or message's reasoning text ('' when it has none). */
export function reasoningText(holder: Json): string {
  for (const field of REASONING_FIELDS) {
    const text = holder[field];
    if (typeof text === "string" && text !== "") return text;
  }
  return "";
}

/** One tool call of a chat message, as both translations read it back. */
export interface ChatToolCall {
  id: string;
  name: string;
  arguments: string;
}

export function chatToolCalls(message: Json): ChatToolCall[] {
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : [];
  return calls.map((call) => {
    const fn = isObject(call.function) ? call.function : {};
    return { id: String(call.id ?? ""), name: String(fn.name ?? ""), arguments: String(fn.arguments ?? "") };
  });
}
