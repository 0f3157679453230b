/** What a streamed chat completion ends with: its text and the usage billed for it. */
export interface ChatResult {
  text: string;
  usage?: {
    prompt_tokens: number;
    completion_tokens: number;
    total_tokens: number;
    /** Of prompt_tokens, those the model's server read from its prompt cache (a cheaper price). */
    prompt_tokens_details?: { cached_tokens?: number };
    cost?: number;
  };
  finishReason?: string;
  /** The request id (`chatcmpl-<id>`), for GET /v1/generations/{id}. */
  id?: string;
}

interface Chunk {
  id?: string;
  choices?: Array<{ delta?: { content?: string | null }; finish_reason?: string | null }>;
  usage?: ChatResult["usage"] | null;
  error?: { message?: string };
}

/**
 * Reads an OpenAI chat-completions SSE stream, calling `onText` with each piece of the answer.
 * An error event after the first byte (docs/architecture.md#errors) is thrown with its message.
 */
export async function readChatStream(
  body: ReadableStream<Uint8Array>,
  onText: (piece: string) => void,
): Promise<ChatResult> {
  const result: ChatResult = { text: "" };
  const decoder = new TextDecoder();
  let pending = "";
  const handle = (line: string) => {
    if (!line.startsWith("data:")) return;
    const data = line.slice(5).trim();
    if (data === "" || data === "[DONE]") return;
    const chunk = JSON.parse(data) as Chunk;
    if (chunk.error) throw new Error(chunk.error.message ?? "The answer stopped with an error.");
    result.id ??= chunk.id;
    for (const choice of chunk.choices ?? []) {
      const piece = choice.delta?.content;
      if (piece) {
        result.text += piece;
        onText(piece);
      }
      if (choice.finish_reason) result.finishReason = choice.finish_reason;
    }
    if (chunk.usage) result.usage = chunk.usage;
  };
  const reader = body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    pending += decoder.decode(value, { stream: !done });
    const lines = pending.split(/\r?\n/);
    pending = done ? "" : lines.pop()!;
    for (const line of lines) handle(line);
    if (done) return result;
  }
}
