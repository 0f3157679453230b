import { createHash } from "node:crypto";
import { messageTexts, toolTexts, type ChatMessageLike } from "@mkt/runtime/token-bounds";

/**
 * Prompts shorter than this many characters carry no sticky key of their own: about OpenAI's
 * 1,024-token threshold for prompt caching, decided on characters because routing comes before
 * the prompt is counted (docs/adr/0033-prompts-counted-only-where-the-count-decides.md).
 */
export const STICKY_PROMPT_CHARS = 4_096;

/** The fields of a chat request (the Responses and Messages APIs translate onto it) the key reads. */
export interface StickyKeyInput {
  messages: readonly ChatMessageLike[];
  tools?: unknown;
  prompt_cache_key?: unknown;
}

const isHead = (m: ChatMessageLike) => m.role === "system" || m.role === "developer";

/** True once the prompt's text (messages and tool definitions) reaches `chars` characters. */
function promptReaches(body: StickyKeyInput, chars: number): boolean {
  let total = 0;
  for (const message of body.messages) {
    for (const text of messageTexts(message)) total += text.length;
    if (total >= chars) return true;
  }
  for (const texts of toolTexts(body.tools)) for (const text of texts) total += text.length;
  return total >= chars;
}

/**
 * What ties a request to its conversation's earlier ones, so that an open model's endpoints are
 * ordered for it by rendezvous hashing instead of a random draw (docs/routing.md, "Sticky
 * conversations"): the client's `prompt_cache_key` when it sends one; otherwise, for a prompt of
 * at least STICKY_PROMPT_CHARS characters, its leading system (or developer) messages and its first
 * user message, which every turn of a conversation resends unchanged. The account is part of the
 * key: one tenant's constant `prompt_cache_key` spreads its clients as another tenant's does,
 * rather than piling every customer who sends "default" onto one endpoint. Undefined when the
 * request has no such signal: it is drawn at random.
 */
export function stickyKey(accountId: string, body: StickyKeyInput): string | undefined {
  const hash = createHash("sha256").update(accountId).update("\0");
  if (typeof body.prompt_cache_key === "string" && body.prompt_cache_key !== "") {
    return hash.update("prompt_cache_key\0").update(body.prompt_cache_key).digest("hex");
  }
  if (!promptReaches(body, STICKY_PROMPT_CHARS)) return undefined;
  const firstOther = body.messages.findIndex((m) => !isHead(m));
  const leading = firstOther === -1 ? body.messages : body.messages.slice(0, firstOther);
  const firstUser = body.messages.find((m) => m.role === "user");
  const head = firstUser ? [...leading, firstUser] : leading;
  if (head.length === 0) return undefined;
  hash.update("head\0");
  for (const message of head) {
    for (const text of messageTexts(message)) hash.update(text).update("\0");
    hash.update("\u0001");
  }
  return hash.digest("hex");
}
