import type { AppError } from "@mkt/runtime/errors";
import { SSE_DONE, sseData, sseError } from "./sse.ts";

/**
 * How a relayed answer is written to the client: the relay always speaks chat completions (a
 * `chat.completion`, or `chat.completion.chunk`s); a public API with another shape (the Responses
 * API) translates them here, on the same relay.
 */
export interface AnswerFormat {
  /** The JSON body of a non-streamed answer, from the relay's `chat.completion` JSON. */
  completion(completion: string): string;
  /** SSE frames for chunks that arrived together, in one write. */
  chunks(chunks: readonly string[]): string;
  /** What ends a stream that completed. */
  end(): string;
  /** The final event of a stream that failed after it started. */
  failure(error: AppError): string;
}

/**
 * Chat completions, as the relay writes them (under our id, `chatcmpl-<request id>`): the JSON
 * texts relayed without parsing.
 */
export function chatAnswerFormat(model: string, requestId: string): AnswerFormat {
  const completionId = `chatcmpl-${requestId}`;
  // With `models` fallbacks the chunks name the model that answered, which `model` (the first
  // asked for) may not be: a failure event names the same one as the chunks before it. Only a
  // reference is kept per write; the chunk is parsed once, if the stream fails.
  let lastChunk: string | undefined;
  return {
    completion: (completion) => completion,
    chunks: (chunks) => {
      lastChunk = chunks.at(-1) ?? lastChunk;
      return chunks.length === 1 ? sseData(chunks[0]!) : chunks.map((chunk) => sseData(chunk)).join("");
    },
    end: () => SSE_DONE,
    failure: (error) => sseError(error, modelOf(lastChunk) ?? model, completionId),
  };
}

/** The `model` a relayed chunk names, if it is readable. */
function modelOf(chunk: string | undefined): string | undefined {
  if (!chunk) return undefined;
  try {
    const { model } = JSON.parse(chunk) as { model?: unknown };
    return typeof model === "string" ? model : undefined;
  } catch {
    return undefined;
  }
}
