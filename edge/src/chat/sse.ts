import type { AppError } from "@mkt/runtime/errors";

const DATA = Buffer.from("data: ");
const END = Buffer.from("\n\n");

/** One Server-Sent Events frame carrying a JSON payload: serialized bytes (kept as bytes), or a value. */
export function sseData(payload: Uint8Array): Buffer;
export function sseData(payload: string | object): string;
export function sseData(payload: Uint8Array | string | object): Buffer | string {
  if (payload instanceof Uint8Array) return Buffer.concat([DATA, payload, END]);
  return `data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`;
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
