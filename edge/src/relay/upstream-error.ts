import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";
import { UpstreamFailure } from "./stream-chat.ts";

/** What the caller is told; generic on purpose: never an upstream body, URL or token. */
const UPSTREAM_MESSAGES = {
  upstream_error: "The model server failed to answer the request.",
  upstream_timeout: "The model server did not answer in time.",
} as const;

/**
 * The error a relay's caller gets for a failed upstream call: an upstream's fault with its own
 * generic message, our own errors as they are, anything else logged (as `what` failed) and
 * answered as an internal error.
 */
export function upstreamAppError(err: unknown, log: Logger, what: string): AppError {
  if (err instanceof AppError) return err;
  if (err instanceof UpstreamFailure && err.code !== "client_cancelled") {
    return new AppError(err.code, UPSTREAM_MESSAGES[err.code]);
  }
  log.error({ err }, `${what} failed`);
  return new AppError("internal_error", "Internal error.");
}
