import type { ChatMessageLike } from "@mkt/runtime/tokens";

/** The fields of an OpenAI chat-completions body the gateway reads; the rest passes through. */
export interface ChatBody {
  model: string;
  messages: ChatMessageLike[];
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  /** Choices to generate (1 to 128, checked by the schema). */
  n?: number | null;
  [field: string]: unknown;
}

/** JSON schema of the body: what is checked here, before any backend is asked. */
export const chatBodySchema = {
  type: "object",
  required: ["model", "messages"],
  properties: {
    model: { type: "string", minLength: 1, maxLength: 256, example: "auto" },
    messages: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        required: ["role"],
        properties: {
          role: { type: "string", enum: ["system", "developer", "user", "assistant", "tool", "function"] },
          content: { type: ["string", "array", "null"] },
          name: { type: "string" },
          tool_calls: { type: ["array", "null"], items: { type: "object" } },
          tool_call_id: { type: "string" },
        },
      },
    },
    stream: { type: ["boolean", "null"] },
    stream_options: { type: ["object", "null"], properties: { include_usage: { type: ["boolean", "null"] } } },
    max_tokens: { type: ["integer", "null"], minimum: 1 },
    max_completion_tokens: { type: ["integer", "null"], minimum: 1 },
    // The fields below reach the model server untouched (docs/decisions.md), but their types and
    // OpenAI's documented ranges are checked here: a wrong one is a 400 naming the field, as
    // OpenAI answers it, rather than a 502 when the upstream refuses the body (or a model server
    // that quietly ignores it). Fields not listed here pass through unchecked.
    temperature: { type: ["number", "null"], minimum: 0, maximum: 2 },
    top_p: { type: ["number", "null"], minimum: 0, maximum: 1 },
    n: { type: ["integer", "null"], minimum: 1, maximum: 128 },
    stop: { type: ["string", "array", "null"], items: { type: "string" } },
    presence_penalty: { type: ["number", "null"], minimum: -2, maximum: 2 },
    frequency_penalty: { type: ["number", "null"], minimum: -2, maximum: 2 },
    seed: { type: ["integer", "null"] },
    logprobs: { type: ["boolean", "null"] },
    top_logprobs: { type: ["integer", "null"], minimum: 0, maximum: 20 },
    logit_bias: { type: ["object", "null"], additionalProperties: { type: "number", minimum: -100, maximum: 100 } },
    user: { type: ["string", "null"] },
    tools: {
      type: ["array", "null"],
      items: {
        type: "object",
        required: ["type"],
        properties: {
          type: { type: "string" },
          function: {
            type: "object",
            required: ["name"],
            properties: { name: { type: "string", minLength: 1 }, parameters: { type: "object" } },
          },
        },
      },
    },
    tool_choice: { type: ["string", "object", "null"] },
    parallel_tool_calls: { type: ["boolean", "null"] },
    response_format: {
      type: ["object", "null"],
      required: ["type"],
      properties: { type: { type: "string" }, json_schema: { type: "object" } },
    },
  },
} as const;
