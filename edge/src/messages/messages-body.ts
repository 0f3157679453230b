import { providerSchema } from "../routing/provider-preferences.ts";
import { MAX_OUTPUT_TOKENS_FIELD } from "../chat/chat-body.ts";

/** A content block of a Messages API message (text, image, tool_use, tool_result, thinking, ...). */
export type ContentBlock = Record<string, unknown> & { type: string };

export interface AnthropicMessage {
  role: "user" | "assistant";
  content: string | ContentBlock[];
}

/** The fields of an Anthropic Messages API body the gateway reads (docs/messages-api.md). */
export interface MessagesBody {
  model: string;
  /** Routing preferences for an open model (provider-preferences.ts). */
  provider?: unknown;
  messages: AnthropicMessage[];
  max_tokens: number;
  system?: string | ContentBlock[];
  tools?: Array<Record<string, unknown> & { name: string }>;
  tool_choice?: Record<string, unknown> & { type: string };
  stop_sequences?: string[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stream?: boolean;
  thinking?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  [field: string]: unknown;
}

/** The body of count_tokens: the same prompt fields, without the answer's settings. */
export type CountTokensBody = Pick<MessagesBody, "model" | "messages" | "system" | "tools" | "tool_choice">;

const block = { type: "object", required: ["type"], properties: { type: { type: "string" } } } as const;

const promptProperties = {
  model: { type: "string", minLength: 1, maxLength: 256, example: "claude-sonnet-4-5" },
  messages: {
    type: "array",
    minItems: 1,
    items: {
      type: "object",
      required: ["role", "content"],
      properties: {
        role: { type: "string", enum: ["user", "assistant"] },
        content: { type: ["string", "array"], items: block },
      },
    },
  },
  system: { type: ["string", "array"], items: block },
  tools: {
    type: "array",
    items: { type: "object", required: ["name"], properties: { name: { type: "string", minLength: 1 } } },
  },
  tool_choice: block,
} as const;

/**
 * JSON schema of a Messages API body: types and Anthropic's ranges, checked before any backend is
 * asked. `max_tokens` is required, as Anthropic requires it.
 */
export const messagesBodySchema = {
  type: "object",
  required: ["model", "messages", "max_tokens"],
  properties: {
    ...promptProperties,
    provider: providerSchema,
    max_tokens: { type: "integer", minimum: 1, maximum: MAX_OUTPUT_TOKENS_FIELD, example: 1024 },
    stop_sequences: { type: "array", items: { type: "string" } },
    temperature: { type: "number", minimum: 0, maximum: 1 },
    top_p: { type: "number", minimum: 0, maximum: 1 },
    top_k: { type: "integer", minimum: 0 },
    stream: { type: "boolean" },
    thinking: { type: "object", required: ["type"], properties: { type: { type: "string" } } },
    metadata: { type: "object" },
  },
} as const;

export const countTokensBodySchema = {
  type: "object",
  required: ["model", "messages"],
  properties: promptProperties,
} as const;
