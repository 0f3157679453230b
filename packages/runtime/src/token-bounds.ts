/**
 * What can be known of a prompt's token count without running the tokenizer
 * (docs/adr/0024-bounded-prompt-work.md). This module must stay free of the tokenizer: the edge
 * imports it on every request and loads the tokenizer only when it has to count.
 */

/** A chat message as far as token counting is concerned. */
export interface ChatMessageLike {
  role?: unknown;
  content?: unknown;
  name?: unknown;
  /** An assistant message's tool calls: their names and arguments are prompt text too. */
  tool_calls?: unknown;
}

/** Per-message framing of the chat format (role markers), as in OpenAI's accounting. */
export const TOKENS_PER_MESSAGE = 3;
/** The framing that primes the reply. */
export const TOKENS_PER_REPLY = 3;

/**
 * The longest token of the o200k vocabulary, in UTF-8 bytes (a run of 128 spaces); a test reads
 * the whole vocabulary to keep this true. No text of `b` bytes can be fewer than `b / 128` tokens.
 */
export const LONGEST_TOKEN_BYTES = 128;

/** The text of a message's content that the tokenizer counts: a string, or an array's text parts. */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && typeof part === "object" && "text" in part ? String(part.text) : ""))
      .join("");
  }
  return content == null ? "" : JSON.stringify(content);
}

/** The texts of a message that are tokenized, in order. */
export function messageTexts(message: ChatMessageLike): string[] {
  const texts = [String(message.role ?? ""), contentText(message.content)];
  if (typeof message.name === "string") texts.push(message.name);
  // A tool round trip sends the model's earlier calls back: without them a conversation's
  // arguments would travel to the model unbilled.
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      const fn = call && typeof call === "object" && "function" in call ? call.function : undefined;
      if (!fn || typeof fn !== "object") continue;
      if ("name" in fn && typeof fn.name === "string") texts.push(fn.name);
      if ("arguments" in fn && typeof fn.arguments === "string") texts.push(fn.arguments);
    }
  }
  return texts;
}

/**
 * The texts of a request's tool definitions (`tools`): each function's name, description and
 * parameter schema reach the model as prompt text, so they are counted (and billed) as such.
 */
export function toolTexts(tools: unknown): string[][] {
  if (!Array.isArray(tools)) return [];
  return tools.map((tool) => {
    const fn = tool && typeof tool === "object" && "function" in tool ? tool.function : undefined;
    if (!fn || typeof fn !== "object") return [];
    const texts: string[] = [];
    if ("name" in fn && typeof fn.name === "string") texts.push(fn.name);
    if ("description" in fn && typeof fn.description === "string") texts.push(fn.description);
    if ("parameters" in fn && fn.parameters !== undefined) texts.push(JSON.stringify(fn.parameters));
    return texts;
  });
}

/**
 * The text groups of a prompt, each with its framing tokens: every message, then every tool
 * definition. Both counts (the exact one in tokens.ts and the bound below) walk this one list.
 */
export function promptParts(messages: readonly ChatMessageLike[], tools?: unknown): string[][] {
  return [...messages.map(messageTexts), ...toolTexts(tools)];
}

/**
 * The fewest tokens this prompt could be, were every token the longest of the vocabulary. A
 * string's UTF-16 length never exceeds its UTF-8 byte length, so the length serves as the bytes
 * without encoding anything: a prompt whose bound passes a context limit cannot fit it, and one
 * that could fit is never refused by it.
 */
export function minimumPromptTokens(messages: readonly ChatMessageLike[], tools?: unknown): number {
  let total = TOKENS_PER_REPLY;
  for (const texts of promptParts(messages, tools)) {
    total += TOKENS_PER_MESSAGE;
    for (const text of texts) total += Math.ceil(text.length / LONGEST_TOKEN_BYTES);
  }
  return total;
}

/**
 * The most tokens this prompt could be: every token of the vocabulary stands for at least one
 * byte of UTF-8 text (counting in pieces adds a token only where a piece starts, never a token
 * without bytes), so a text is at most its byte length in tokens, plus the framing. It costs a
 * walk over the text, no tokenizer: admission holds on it where that changes nothing the client
 * would see, and the prompt is counted while the answer runs.
 */
export function maximumPromptTokens(messages: readonly ChatMessageLike[], tools?: unknown): number {
  let total = TOKENS_PER_REPLY;
  for (const texts of promptParts(messages, tools)) {
    total += TOKENS_PER_MESSAGE;
    for (const text of texts) total += Buffer.byteLength(text, "utf8");
  }
  return total;
}
