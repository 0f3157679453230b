import type { Route } from "@mkt/proto/registry/v1/registry";
import type { ChatBody } from "../chat/chat-body.ts";
import type { PromptTokenCounter } from "../chat/prompt-tokens.ts";

/**
 * The `max_tokens` the chat body carries for a Messages API request. Agents send caps far above
 * what a small model serves (Claude Code asks for tens of thousands), and Anthropic's API has no
 * "absent" cap, so a cap above the model's output cap or the room left in its context is lowered
 * to it rather than refused:
 * - at or above the model's cap, the body carries none, and admission takes the smallest of that
 *   cap, the context's room and what the credit pays, and holds for that (chat-call.ts);
 * - below it, the cap stands unless the prompt may leave less room than it asks. Each token is at
 *   least a byte of the serialized body, so only a body within `requested` bytes of the context
 *   has its prompt counted here, and its cap lowered to the room left.
 */
export async function servedOutputCap(
  counter: PromptTokenCounter,
  accountId: string,
  route: Route,
  chat: ChatBody,
  requested: number,
): Promise<number | undefined> {
  if (BigInt(requested) >= route.maxOutputTokensCap) return undefined;
  const context = Number(route.contextWindow);
  const bytes = Buffer.from(JSON.stringify(chat));
  if (context - bytes.length >= requested) return requested;
  const prompt = await counter.count({
    accountId,
    body: bytes,
    messages: chat.messages,
    tools: chat.tools,
    limit: context,
  });
  const room = context - prompt;
  // No room at all: admission refuses the prompt itself (context_length_exceeded).
  return room > 0 ? Math.min(requested, room) : requested;
}
