import { providerSchema } from "../routing/provider-preferences.ts";
import { MAX_OUTPUT_TOKENS_FIELD } from "../chat/chat-body.ts";

/** One `input` item of a Responses API request (message, function_call, function_call_output, ...). */
export type InputItem = Record<string, unknown> & { type?: string };

/** The fields of a Responses API body the gateway reads (docs/responses-api.md); others are ignored. */
export interface ResponsesBody {
  model: string;
  /** Routing preferences for an open model (provider-preferences.ts). */
  provider?: unknown;
  input: string | InputItem[];
  instructions?: string | null;
  max_output_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  tools?: Array<Record<string, unknown> & { type: string }> | null;
  tool_choice?: string | Record<string, unknown> | null;
  parallel_tool_calls?: boolean | null;
  text?: { format?: (Record<string, unknown> & { type: string }) | null } | null;
  stream?: boolean | null;
  store?: boolean | null;
  previous_response_id?: string | null;
  metadata?: Record<string, string> | null;
  user?: string | null;
  [field: string]: unknown;
}

/** JSON schema of the body: types and OpenAI's ranges, checked before any backend is asked. */
export const responsesBodySchema = {
  type: "object",
  required: ["model", "input"],
  properties: {
    model: { type: "string", minLength: 1, maxLength: 256, example: "auto" },
    provider: providerSchema,
    input: {
      type: ["string", "array"],
      minLength: 1,
      minItems: 1,
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
