import type { FastifyInstance } from "fastify";

/**
 * JSON bodies through Fastify's own safe parser (prototype-poisoning checks), except that an empty
 * body is "no body" rather than an error: clients such as curl scripts send
 * `Content-Type: application/json` on every call, DELETE included. Routes that need a body still
 * refuse the missing one through their schema, with `param` naming it.
 */
export function installJsonBodyParser(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser("error", "error");
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    if (body === "") return done(null, undefined);
    parseJson(request, body as string, done); // parseAs: "string" above
  });
}
