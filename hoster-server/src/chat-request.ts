import { AppError } from "@mkt/runtime/errors";
import type { ChatMessageLike } from "@mkt/runtime/tokens";

/** The parts of an OpenAI chat-completions request the demo model uses. */
export interface ChatRequest {
  model: string;
  messages: ChatMessageLike[];
  /** The output cap (`max_completion_tokens` wins over the older `max_tokens`). */
  maxTokens: number | undefined;
  stream: boolean;
  includeUsage: boolean;
}

function bad(param: string, message: string): AppError {
  return new AppError("invalid_request", message, { param });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function optionalCap(body: Record<string, unknown>, field: string): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw bad(field, `${field} must be a positive integer.`);
  }
  return value;
}

/** Validates a chat request body; throws a 400 AppError naming the first bad field. */
export function parseChatRequest(body: unknown): ChatRequest {
  if (!isObject(body)) throw bad("body", "The request body must be a JSON object.");
  const { model, messages, stream, stream_options: streamOptions } = body;
  if (typeof model !== "string" || model.trim() === "") throw bad("model", "model must be a non-empty string.");
  if (!Array.isArray(messages) || messages.length === 0) {
    throw bad("messages", "messages must be a non-empty array.");
  }
  messages.forEach((message: unknown, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw bad(param, `${param} must be an object.`);
    if (typeof message.role !== "string" || message.role === "") throw bad(`${param}.role`, "role must be a string.");
    const content = message.content;
    if (content !== undefined && content !== null && typeof content !== "string" && !Array.isArray(content)) {
      throw bad(`${param}.content`, "content must be a string or an array of content parts.");
    }
  });
  if (stream !== undefined && stream !== null && typeof stream !== "boolean") {
    throw bad("stream", "stream must be a boolean.");
  }
  if (streamOptions !== undefined && streamOptions !== null && !isObject(streamOptions)) {
    throw bad("stream_options", "stream_options must be an object.");
  }
  const includeUsage = isObject(streamOptions) ? streamOptions.include_usage : undefined;
  if (includeUsage !== undefined && includeUsage !== null && typeof includeUsage !== "boolean") {
    throw bad("stream_options.include_usage", "include_usage must be a boolean.");
  }
  const maxTokens = optionalCap(body, "max_tokens");
  const maxCompletionTokens = optionalCap(body, "max_completion_tokens");
  return {
    model,
    messages: messages as ChatMessageLike[],
    maxTokens: maxCompletionTokens ?? maxTokens,
    stream: stream === true,
    includeUsage: includeUsage === true,
  };
}
