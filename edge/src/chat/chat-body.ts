import type { ChatMessageLike } from "@mkt/runtime/tokens";

/** The fields of an OpenAI chat-completions body the gateway reads; the rest passes through. */
export interface ChatBody {
  model: string;
  messages: ChatMessageLike[];
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
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
        },
      },
    },
    stream: { type: ["boolean", "null"] },
    stream_options: { type: ["object", "null"], properties: { include_usage: { type: ["boolean", "null"] } } },
    max_tokens: { type: ["integer", "null"], minimum: 1 },
    max_completion_tokens: { type: ["integer", "null"], minimum: 1 },
  },
} as const;
