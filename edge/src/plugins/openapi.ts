import type { FastifyInstance } from "fastify";
import swagger from "@fastify/swagger";
import swaggerUi from "@fastify/swagger-ui";

/** OpenAPI document built from the route schemas, with a browsable UI at /docs. */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      info: {
        title: "Inference marketplace API",
        description:
          "OpenAI-compatible chat completions, API keys and usage. Errors are always " +
          '`{"error": {"message", "type", "param", "code"}}`.',
        version: "1",
      },
      components: {
        securitySchemes: {
          apiKey: { type: "http", scheme: "bearer" },
          adminToken: { type: "http", scheme: "bearer", description: "ADMIN_TOKEN" },
        },
      },
    },
  });
  await app.register(swaggerUi, { routePrefix: "/docs" });
}
