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
  /** The choices asked for (`n`, default 1). */
  n: number;
  /** Function tools offered to the model (`tools`), in order. */
  tools: DemoTool[];
  /** `tools` as sent: its definitions are prompt text, counted like the gateway counts them. */
  toolDefinitions: unknown;
  /** `none`, `auto`, `required`, or the name of the one function the model must call. */
  toolChoice: "none" | "auto" | "required" | { name: string };
  /** The JSON schema of `response_format` json_schema (an object schema for json_object); undefined: text. */
  responseSchema: unknown;
  /** Whether the client asks for reasoning (`reasoning_effort`, or a `reasoning` object), at any effort but `none`. */
  reasoning: boolean;
}

/** A function tool as the demo model sees it. */
export interface DemoTool {
  name: string;
  /** JSON schema of its arguments (OpenAI's default when absent: an object with no properties). */
  parameters: unknown;
}

/** The most choices the demo answers: as many as OpenAI's API accepts. */
const MAX_N = 128;

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
  const tools = parseTools(body.tools);
  const toolChoice = parseToolChoice(body.tool_choice, tools);
  const maxTokens = optionalCap(body, "max_tokens");
  const maxCompletionTokens = optionalCap(body, "max_completion_tokens");
  const n = optionalCap(body, "n") ?? 1;
  if (n > MAX_N) throw bad("n", `n must be at most ${MAX_N}.`);
  return {
    model,
    messages: messages as ChatMessageLike[],
    maxTokens: maxCompletionTokens ?? maxTokens,
    stream: stream === true,
    includeUsage: includeUsage === true,
    n,
    tools,
    toolDefinitions: body.tools,
    toolChoice,
    responseSchema: parseResponseFormat(body.response_format),
    reasoning: parseReasoningAsked(body),
  };
}

function parseTools(tools: unknown): DemoTool[] {
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) throw bad("tools", "tools must be an array.");
  return tools.map((tool: unknown, i) => {
    const fn = isObject(tool) && tool.type === "function" && isObject(tool.function) ? tool.function : undefined;
    if (!fn || typeof fn.name !== "string" || fn.name === "") {
      throw bad(`tools[${i}]`, "Each tool must be {type: 'function', function: {name, parameters}}.");
    }
    return { name: fn.name, parameters: fn.parameters ?? { type: "object", properties: {} } };
  });
}

function parseToolChoice(choice: unknown, tools: readonly DemoTool[]): ChatRequest["toolChoice"] {
  if (choice === undefined || choice === null) return tools.length > 0 ? "auto" : "none";
  if (choice === "none" || choice === "auto" || choice === "required") return choice;
  const name = isObject(choice) && isObject(choice.function) ? choice.function.name : undefined;
  if (typeof name !== "string") {
    throw bad("tool_choice", "tool_choice must be none, auto, required or {type: 'function', function: {name}}.");
  }
  if (!tools.some((tool) => tool.name === name)) {
    throw bad("tool_choice", `tool_choice names the function '${name}', which is not in tools.`);
  }
  return { name };
}

/**
 * `reasoning_effort` is OpenAI's and vLLM's field; `reasoning: {effort}` is OpenRouter's and the
 * Responses API's, which agents send to chat endpoints too. Any effort is taken (providers keep
 * adding levels); only `none`, or OpenRouter's `enabled: false`, turns reasoning off.
 */
function parseReasoningAsked(body: Record<string, unknown>): boolean {
  const { reasoning_effort: effort, reasoning } = body;
  if (effort !== undefined && effort !== null && typeof effort !== "string") {
    throw bad("reasoning_effort", "reasoning_effort must be a string.");
  }
  if (reasoning !== undefined && reasoning !== null && !isObject(reasoning)) {
    throw bad("reasoning", "reasoning must be an object.");
  }
  const byEffort = typeof effort === "string" && effort !== "none";
  const byObject = isObject(reasoning) && reasoning.effort !== "none" && reasoning.enabled !== false;
  return byEffort || byObject;
}

function parseResponseFormat(format: unknown): unknown {
  if (format === undefined || format === null) return undefined;
  if (!isObject(format)) throw bad("response_format", "response_format must be an object.");
  if (format.type === "json_object") return { type: "object" };
  if (format.type !== "json_schema") return undefined;
  const jsonSchema = format.json_schema;
  if (!isObject(jsonSchema) || !isObject(jsonSchema.schema)) {
    throw bad("response_format.json_schema.schema", "response_format json_schema needs json_schema.schema.");
  }
  return jsonSchema.schema;
}
