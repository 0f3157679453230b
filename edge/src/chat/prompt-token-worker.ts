import { countPromptTokens, type ChatMessageLike } from "@mkt/runtime/tokens";

/** A prompt to count in a worker: the serialized chat body and where counting may stop. */
export interface PromptJob {
  body: Uint8Array;
  limit: number;
}

/**
 * Runs in a worker thread (prompt-tokens.ts): counts the prompt tokens of a serialized chat body,
 * stopping once past `limit`. This is the only place the edge loads the tokenizer off the main
 * thread; parsing the body here keeps a large prompt's parse off the main thread too.
 */
export default function countBodyPromptTokens(job: PromptJob): number {
  const parsed = JSON.parse(Buffer.from(job.body).toString("utf8")) as { messages: ChatMessageLike[]; tools?: unknown };
  return countPromptTokens(parsed.messages, { limit: job.limit, tools: parsed.tools });
}
