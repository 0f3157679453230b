import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { AppError } from "@mkt/runtime/errors";

/**
 * The edge's one error handler: every failure leaves as an OpenAI-shaped body
 * (docs/architecture.md#errors). AppErrors carry their status and headers; a body over the limit is
 * 413 `request_too_large`; Fastify's other 4xx (bad JSON, wrong media type) become
 * `invalid_request`; anything else is logged and answered with a generic 500, so no internal
 * message or upstream body reaches a client.
 */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    const { error, status } = appErrorOf(err, request);
    return reply.code(status).headers(error.headers).send(error.toBody());
  });
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send(new AppError("not_found", `Unknown path: ${request.method} ${request.url.split("?")[0]}.`).toBody()),
  );
}

/**
 * Any failure as the AppError the caller is shown, whatever API shape renders it (OpenAI's here,
 * Anthropic's on the Messages API): a body over the limit is 413 `request_too_large`, Fastify's
 * other 4xx `invalid_request`, anything unknown is logged and becomes a generic 500.
 */
export function appErrorOf(err: FastifyError, request: FastifyRequest): { error: AppError; status: number } {
  if (err instanceof AppError) {
    if (err.httpStatus >= 500) request.log.warn({ code: err.code, cause: err.cause }, "request failed");
    return { error: err, status: err.httpStatus };
  }
  const status = err.statusCode ?? 500;
  if (err.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    const limit = request.routeOptions.bodyLimit ?? request.server.initialConfig.bodyLimit;
    const error = new AppError("request_too_large", `The request body is larger than the ${limit}-byte limit.`, {
      param: "body",
    });
    return { error, status: error.httpStatus };
  }
  if (status >= 400 && status < 500) {
    // The JSON parser's message quotes the body, so a fixed text replaces it.
    const message =
      err instanceof SyntaxError || err.code === "FST_ERR_CTP_INVALID_JSON_BODY"
        ? "The request body is not valid JSON."
        : err.message;
    // Fastify's own 4xx (an unsupported media type, …) keep their status.
    return { error: new AppError("invalid_request", message, { param: "body" }), status };
  }
  request.log.error({ err }, "unhandled error");
  return { error: new AppError("internal_error", "Internal error."), status: 500 };
}

/**
 * Fastify's `frameworkErrors`: the router's own refusals, answered before any route or error
 * handler runs, in the OpenAI shape too. A path that is not valid UTF-8 once percent-decoded
 * (`%ED%A0%80`, a lone surrogate) or a path parameter over the router's length limit is a bad
 * value, so 400 rather than Fastify's bare 400 / 414.
 */
export function frameworkErrorReply(err: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const message =
    err.code === "FST_ERR_MAX_PARAM_LENGTH"
      ? "A path parameter is longer than any identifier."
      : "The request path is not a valid URL component.";
  void reply.code(400).send(new AppError("invalid_request", message, { param: "path" }).toBody());
}
