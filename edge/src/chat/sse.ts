import type { AppError } from "@mkt/runtime/errors";

/** One Server-Sent Events frame carrying a JSON payload (already serialized, or an object). */
export function sseData(payload: Uint8Array | string | object): string {
  const text =
    typeof payload === "string"
      ? payload
      : payload instanceof Uint8Array
        ? Buffer.from(payload).toString("utf8")
        : JSON.stringify(payload);
  return `data: ${text}\n\n`;
}

export const SSE_DONE = "data: [DONE]\n\n";

/**
 * The final event of a stream that failed after it started (DESIGN.md §4): a chunk whose choice
 * finishes with `error` and which carries the OpenAI error object, so SDKs raise it instead of
 * ending quietly with a truncated answer.
 */
export function sseError(error: AppError, model: string, completionId: string): string {
  return sseData({
    id: completionId,
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, delta: {}, finish_reason: "error" }],
    ...error.toBody(),
  });
}
