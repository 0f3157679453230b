import type { FastifyInstance } from "fastify";
import { embed } from "../embeddings/embeddings-call.ts";
import { embeddingsBodySchema, type EmbeddingsBody } from "../embeddings/embeddings-body.ts";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, integer, number, object, replies, string } from "./response-schemas.ts";

/** OpenAI's embeddings list, with `usage.cost`. */
const embeddingsSchema = object({
  object: string("`list`"),
  data: arrayOf(
    object({
      object: string("`embedding`"),
      index: integer(),
      embedding: {
        type: ["array", "string"],
        items: { type: "number" },
        description: "Numbers (`encoding_format: float`), or base64 of little-endian float32 values (`base64`)",
      },
    }),
  ),
  model: string(),
  usage: object({
    prompt_tokens: integer(),
    total_tokens: integer(),
    cost: number("What the request is charged, in USD"),
  }),
});

/** POST /v1/embeddings: for models of kind `embedding` (docs/embeddings.md). */
export function embeddingsRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.post<{ Body: EmbeddingsBody }>(
    "/v1/embeddings",
    {
      onRequest: deps.auth({ allowScoped: true }),
      schema: {
        summary: "Create embeddings (OpenAI-compatible; `encoding_format` `float` or `base64`)",
        description:
          "For models of kind `embedding` (`GET /v1/models` shows each model's `kind`); a chat model answers " +
          "404 `model_not_found`. Billed per input token at the model's input price; `usage.cost` is what the " +
          "request is charged.",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        body: embeddingsBodySchema,
        response: replies(200, embeddingsSchema),
      },
    },
    async (request, reply) => {
      const answer = await embed(deps, request, reply);
      // The client left: nothing to send (and nothing was billed).
      if (answer === undefined) return reply.hijack();
      return reply.type("application/json").send(answer);
    },
  );
}
