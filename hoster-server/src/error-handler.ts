import type { FastifyError, FastifyInstance } from "fastify";
import { AppError } from "@mkt/runtime/errors";

/** Every error this server sends is OpenAI-shaped (docs/adr/0005-openai-error-shape.md). */
export function installErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof AppError) {
      return reply.code(err.httpStatus).headers(err.headers).send(err.toBody());
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      // Fastify's own client errors (bad JSON, body too large, wrong media type). The JSON parser's
      // message quotes the body, so a fixed text replaces it.
      const message = err instanceof SyntaxError ? "The request body is not valid JSON." : err.message;
      return reply.code(status).send(new AppError("invalid_request", message, { param: "body" }).toBody());
    }
    request.log.error({ err }, "request failed");
    return reply.code(500).send(new AppError("internal_error", "Internal error.").toBody());
  });
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(new AppError("not_found", `No route for ${request.method} ${request.url}.`).toBody()),
  );
}
