import type { FastifyInstance, FastifyRequest } from "fastify";
import { AppError } from "@mkt/runtime/errors";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "./json-depth.ts";

/** Each JSON request's body as it arrived, for routes that forward it (chat). */
const rawBodies = new WeakMap<FastifyRequest, Buffer>();

/**
 * JSON bodies through Fastify's own safe parser (prototype-poisoning checks), except that an empty
 * body is "no body" rather than an error: clients such as curl scripts send
 * `Content-Type: application/json` on every call, DELETE included. Routes that need a body still
 * refuse the missing one through their schema, with `param` naming it.
 *
 * The bytes are kept (rawJsonBody): a chat request is forwarded as it came, since validation
 * neither coerces nor removes anything; serializing the parsed body again cost the main thread
 * ~25 ms per 14 MB prompt.
 *
 * A body nested deeper than MAX_JSON_DEPTH is refused here, before anything walks it.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (request, body, done) => {
    const bytes = body as Buffer; // parseAs: "buffer" above
    if (bytes.length === 0) return done(null, undefined);
    rawBodies.set(request, bytes);
    parseJson(request, bytes.toString("utf8"), (err: Error | null, parsed?: unknown) => {
      if (err) return done(err);
      if (nestedDeeperThan(parsed, MAX_JSON_DEPTH)) {
        const message = `The request body is nested deeper than ${MAX_JSON_DEPTH} levels.`;
        return done(new AppError("invalid_request", message, { param: "body" }));
      }
      done(null, parsed);
    });
  });
}

/** The JSON body of `request` as it arrived; undefined when it had none. */
export function rawJsonBody(request: FastifyRequest): Buffer | undefined {
  return rawBodies.get(request);
}
