import { countTokens, decode, encode } from "gpt-tokenizer";

/** A chat message as far as token counting is concerned. */
export interface ChatMessageLike {
  role?: unknown;
  content?: unknown;
  name?: unknown;
}

// Per-message framing of the chat format (role markers), as in OpenAI's accounting.
const TOKENS_PER_MESSAGE = 3;
const TOKENS_PER_REPLY = 3;

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && typeof part === "object" && "text" in part ? String(part.text) : ""))
      .join("");
  }
  return content == null ? "" : JSON.stringify(content);
}

// Text that spells a special token (`<|endoftext|>`) is counted as the ordinary text it is, as
// OpenAI counts user content; gpt-tokenizer would throw on it by default.
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/** Tokens in a text, with the o200k BPE encoding. */
export function countTextTokens(text: string): number {
  return text.length === 0 ? 0 : countTokens(text, PLAIN_TEXT);
}

/** The o200k token ids of a text (special-token spellings as plain text, as in countTextTokens). */
export function encodeText(text: string): number[] {
  return encode(text, PLAIN_TEXT);
}

/** The text of o200k token ids (a cut inside a character decodes to U+FFFD). */
export function decodeTokens(tokens: readonly number[]): string {
  return decode(tokens);
}

/**
 * Prompt tokens of a chat request. The gateway and the reference hoster server both count with
 * this function, so a well-behaved upstream's report and the gateway's own count agree.
 */
export function countPromptTokens(messages: readonly ChatMessageLike[]): number {
  let total = TOKENS_PER_REPLY;
  for (const message of messages) {
    total +=
      TOKENS_PER_MESSAGE + countTextTokens(String(message.role ?? "")) + countTextTokens(contentText(message.content));
    if (typeof message.name === "string") total += countTextTokens(message.name);
  }
  return total;
}
