import type { FastifyError, FastifyInstance } from "fastify";
import { AppError } from "@mkt/runtime/errors";

/**
 * The edge's one error handler: every failure leaves as an OpenAI-shaped body (DESIGN.md §4).
 * AppErrors carry their status and headers; Fastify's own 4xx (bad JSON, body too large, wrong
 * media type) become `invalid_request`; anything else is logged and answered with a generic 500,
 * so no internal message or upstream body reaches a client.
 */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof AppError) {
      if (err.httpStatus >= 500) request.log.warn({ code: err.code, cause: err.cause }, "request failed");
      return reply.code(err.httpStatus).headers(err.headers).send(err.toBody());
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      // The JSON parser's message quotes the body, so a fixed text replaces it.
      const message =
        err instanceof SyntaxError || err.code === "FST_ERR_CTP_INVALID_JSON_BODY"
          ? "The request body is not valid JSON."
          : err.message;
      return reply.code(status).send(new AppError("invalid_request", message, { param: "body" }).toBody());
    }
    request.log.error({ err }, "unhandled error");
    return reply.code(500).send(new AppError("internal_error", "Internal error.").toBody());
  });
  app.setNotFoundHandler((request, reply) =>
    reply
      .code(404)
      .send(new AppError("not_found", `Unknown path: ${request.method} ${request.url.split("?")[0]}.`).toBody()),
  );
}
