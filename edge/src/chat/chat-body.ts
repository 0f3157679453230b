import type { FromSchema } from "json-schema-to-ts";
import { AppError } from "@mkt/runtime/errors";
import { MAX_MODELS } from "./model-choices.ts";
import { providerSchema } from "../routing/provider-preferences.ts";

/** The largest `max_tokens` / `max_completion_tokens` accepted, as OpenAI bounds them (2^31 − 1). */
export const MAX_OUTPUT_TOKENS_FIELD = 2_147_483_647;
/** `seed` is an int64 upstream; beyond 2^63 a JSON number cannot be one. */
const MAX_SEED = 2 ** 63;

/**
 * JSON schema of the body: what is checked here, before any backend is asked, and the one
 * declaration of the body (ChatBody is derived from it). Unknown fields pass through: no
 * `additionalProperties`, so the type keeps them as `unknown`.
 */
export const chatBodySchema = {
  type: "object",
  // `model` or `models` is required: checked by modelChoices, which names the missing field.
  required: ["messages"],
  properties: {
    // The model to call; `models` may add fallbacks or stand instead of it (modelChoices).
    model: { type: "string", minLength: 1, maxLength: 256, example: "auto" },
    models: {
      type: ["array", "null"],
      description:
        "Fallbacks (OpenRouter's convention): models tried in order after `model` (or instead of it) when " +
        "one has no healthy server or fails before the first byte of its answer. The answer's `model` " +
        "names the one that answered, and it is charged at that model's prices.",
      minItems: 1,
      maxItems: MAX_MODELS,
      items: { type: "string", minLength: 1, maxLength: 256 },
      example: ["demo-small", "cloud-mini"],
    },
    provider: providerSchema,
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
    // OpenAI's own bound (an int32): past it a count is not a count, and 2^63−1 or 1e300 would
    // not fit the int64 fields of the gRPC calls behind.
    max_tokens: { type: ["integer", "null"], minimum: 1, maximum: MAX_OUTPUT_TOKENS_FIELD },
    max_completion_tokens: { type: ["integer", "null"], minimum: 1, maximum: MAX_OUTPUT_TOKENS_FIELD },
    seed: { type: ["integer", "null"], minimum: -MAX_SEED, maximum: MAX_SEED },
    // The fields below reach the model server untouched (docs/adr/0031-chat-bodies-pass-through.md), but their types and
    // OpenAI's documented ranges are checked here: a wrong one is a 400 naming the field, as
    // OpenAI answers it, rather than a 502 when the upstream refuses the body (or a model server
    // that quietly ignores it). Fields not listed here pass through unchecked.
    temperature: { type: ["number", "null"], minimum: 0, maximum: 2 },
    top_p: { type: ["number", "null"], minimum: 0, maximum: 1 },
    n: { type: ["integer", "null"], minimum: 1, maximum: 128 },
    stop: { type: ["string", "array", "null"], items: { type: "string" } },
    presence_penalty: { type: ["number", "null"], minimum: -2, maximum: 2 },
    frequency_penalty: { type: ["number", "null"], minimum: -2, maximum: 2 },
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
    modalities: { type: ["array", "null"], items: { type: "string" } },
    tool_choice: { type: ["string", "object", "null"] },
    parallel_tool_calls: { type: ["boolean", "null"] },
    response_format: {
      type: ["object", "null"],
      required: ["type"],
      properties: { type: { type: "string" }, json_schema: { type: "object" } },
    },
  },
} as const;

/** A chat-completions body as its schema lets it through; fields the schema does not name are `unknown`. */
export type ChatBody = FromSchema<typeof chatBodySchema>;

/** One message of a chat body: the other APIs' translations build these too. */
export type ChatMessage = ChatBody["messages"][number];

/** One tool of a chat body, as the translations declare the other APIs' tools. */
export type ChatTool = NonNullable<ChatBody["tools"]>[number];

/**
 * Audio output has no price (every price is per text token), so a request asking for it is
 * refused instead of answered with audio nobody is billed for. Audio *input* parts are not
 * refused here: they are prompt content, counted as such.
 */
export function refuseAudioOutput(body: ChatBody): void {
  if (Array.isArray(body.modalities) && body.modalities.includes("audio")) {
    throw new AppError("invalid_request", "Audio output is not supported: `modalities` may only ask for text.", {
      param: "modalities",
    });
  }
  if (body.audio !== undefined && body.audio !== null) {
    throw new AppError("invalid_request", "Audio output is not supported: remove the `audio` parameters.", {
      param: "audio",
    });
  }
}
