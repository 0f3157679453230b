import type { FromSchema } from "json-schema-to-ts";
import { providerSchema } from "../routing/provider-preferences.ts";
import { MAX_OUTPUT_TOKENS_FIELD } from "../chat/chat-body.ts";

/**
 * JSON schema of a Responses API body: types and OpenAI's ranges, checked before any backend is
 * asked, and the one declaration of the body (ResponsesBody is derived from it). Fields it does
 * not name are read, where they are, by the translation (docs/responses-api.md), and otherwise
 * ignored.
 */
export const responsesBodySchema = {
  type: "object",
  required: ["model", "input"],
  properties: {
    model: { type: "string", minLength: 1, maxLength: 256, example: "auto" },
    // Routing preferences for an open model (provider-preferences.ts).
    provider: providerSchema,
    input: {
      type: ["string", "array"],
      minLength: 1,
      minItems: 1,
      // Each item's own fields are read by its translation (message, function_call, ...).
      items: { type: "object" },
      example: "Hello!",
    },
    instructions: { type: ["string", "null"] },
    max_output_tokens: { type: ["integer", "null"], minimum: 1, maximum: MAX_OUTPUT_TOKENS_FIELD },
    temperature: { type: ["number", "null"], minimum: 0, maximum: 2 },
    top_p: { type: ["number", "null"], minimum: 0, maximum: 1 },
    tools: {
      type: ["array", "null"],
      items: {
        type: "object",
        required: ["type"],
        properties: { type: { type: "string" }, name: { type: "string" }, parameters: { type: ["object", "null"] } },
      },
    },
    tool_choice: { type: ["string", "object", "null"] },
    parallel_tool_calls: { type: ["boolean", "null"] },
    text: {
      type: ["object", "null"],
      properties: {
        format: {
          type: ["object", "null"],
          required: ["type"],
          properties: { type: { type: "string" }, name: { type: "string" }, schema: { type: "object" } },
        },
      },
    },
    stream: { type: ["boolean", "null"] },
    store: { type: ["boolean", "null"] },
    previous_response_id: { type: ["string", "null"] },
    metadata: { type: ["object", "null"], additionalProperties: { type: "string" } },
    user: { type: ["string", "null"] },
  },
} as const;

/** A Responses API body as its schema lets it through; fields the schema does not name are `unknown`. */
export type ResponsesBody = FromSchema<typeof responsesBodySchema>;

/** One `input` item (message, function_call, function_call_output, ...): an object, read by its type. */
export type InputItem = Exclude<ResponsesBody["input"], string>[number];
