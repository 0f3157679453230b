import { countPromptTokens, type ChatMessageLike } from "@mkt/runtime/tokens";

/**
 * Runs in a worker thread (prompt-tokens.ts): counts the prompt tokens of a serialized chat body.
 * This is the only place the edge loads the tokenizer.
 */
export default function countBodyPromptTokens(body: Uint8Array): number {
  const parsed = JSON.parse(Buffer.from(body).toString("utf8")) as { messages: ChatMessageLike[] };
  return countPromptTokens(parsed.messages);
}
