import type { FromSchema } from "json-schema-to-ts";
import { providerSchema } from "../routing/provider-preferences.ts";
import { MAX_OUTPUT_TOKENS_FIELD } from "../chat/chat-body.ts";

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
        // `system` anywhere in the list: instructions at that point of the conversation.
        role: { type: "string", enum: ["user", "assistant", "system"] },
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
 * asked, and the one declaration of the body (MessagesBody is derived from it; fields it does not
 * name are read, where they are, by the translation: docs/messages-api.md). `max_tokens` is
 * required, as Anthropic requires it.
 */
export const messagesBodySchema = {
  type: "object",
  required: ["model", "messages", "max_tokens"],
  properties: {
    ...promptProperties,
    // Routing preferences for an open model (provider-preferences.ts).
    provider: providerSchema,
    max_tokens: { type: "integer", minimum: 1, maximum: MAX_OUTPUT_TOKENS_FIELD, example: 1024 },
    stop_sequences: { type: "array", items: { type: "string" } },
    temperature: { type: "number", minimum: 0, maximum: 1 },
    top_p: { type: "number", minimum: 0, maximum: 1 },
    top_k: { type: "integer", minimum: 0 },
    stream: { type: "boolean" },
    // Any type (enabled, adaptive, disabled, and those to come): only disabled turns reasoning off.
    thinking: { type: "object", required: ["type"], properties: { type: { type: "string" } } },
    // Only `effort` is read (request-translation.ts).
    output_config: { type: "object", properties: { effort: { type: "string" } } },
    // Anthropic's own context editing runs on its side; here the whole conversation is sent as is.
    context_management: { type: "object" },
    metadata: { type: "object" },
  },
} as const;

export const countTokensBodySchema = {
  type: "object",
  required: ["model", "messages"],
  properties: promptProperties,
} as const;

/** A Messages API body as its schema lets it through; fields the schema does not name are `unknown`. */
export type MessagesBody = FromSchema<typeof messagesBodySchema>;

/** The body of count_tokens: the same prompt fields, without the answer's settings. */
export type CountTokensBody = FromSchema<typeof countTokensBodySchema>;

/** One message of `messages`: a role and its text or content blocks. */
export type AnthropicMessage = MessagesBody["messages"][number];

/** A content block of a Messages API message (text, image, tool_use, tool_result, thinking, ...). */
export type ContentBlock = FromSchema<typeof block>;
