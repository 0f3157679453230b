import type { FastifyError, FastifyInstance } from "fastify";
import type { AppError } from "@mkt/runtime/errors";
import { appErrorOf } from "../plugins/error-handler.ts";

/**
 * Anthropic's error types by HTTP status: its SDKs pick the exception class by status, while
 * Claude Code and other agents read `error.type`. A 502 or 503 is `api_error` (every SDK retries a
 * 5xx, honouring `retry-after`); `overloaded_error` is Anthropic's own capacity signal (its 529),
 * which this gateway never sends.
 */
const TYPE_BY_STATUS: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "billing_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  504: "timeout_error",
};

export function anthropicErrorType(status: number): string {
  return TYPE_BY_STATUS[status] ?? (status >= 500 ? "api_error" : "invalid_request_error");
}

/**
 * Anthropic's error body, with our `code` and `param` (the field at fault, or null) beside its
 * type: the same fields an OpenAI-shaped error has, so a client reading either finds them.
 */
export function anthropicErrorBody(error: AppError, status = error.httpStatus, requestId?: string) {
  return {
    type: "error",
    error: {
      type: anthropicErrorType(status),
      message: error.message,
      param: error.param ?? null,
      code: error.code,
    },
    ...(requestId ? { request_id: requestId } : {}),
  };
}

/**
 * The error handler of the Messages API's routes (a Fastify scope of their own): the same
 * failures the rest of the edge answers in OpenAI's shape, with the same statuses and headers
 * (`retry-after` on a 429 or 503), in Anthropic's.
 */
export function installAnthropicErrorHandler(scope: FastifyInstance): void {
  scope.setErrorHandler((err: FastifyError, request, reply) => {
    const { error, status } = appErrorOf(err, request);
    return reply
      .code(status)
      .headers(error.headers)
      .send(anthropicErrorBody(error, status, request.id));
  });
}
