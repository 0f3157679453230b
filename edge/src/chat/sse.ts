import type { AppError } from "@mkt/runtime/errors";

/** One Server-Sent Events frame carrying a JSON payload: serialized text, or a value. */
export function sseData(payload: string | object): string {
  return `data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`;
}

export const SSE_DONE = "data: [DONE]\n\n";

/**
 * The final event of a stream that failed after it started: a chunk whose choice
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
