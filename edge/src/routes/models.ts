import type { FastifyInstance } from "fastify";
import { ListModelsRequest } from "@mkt/proto/registry/v1/registry";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";

/** GET /v1/models: the models the key may call, in OpenAI's list shape. */
export function modelRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.get(
    "/v1/models",
    {
      onRequest: deps.auth({ allowScoped: true }),
      schema: { summary: "List the models your key may call", tags: ["chat"], security: [{ apiKey: [] }] },
    },
    async (request) => {
      const { models } = await deps.backends.registry.listModels(
        ListModelsRequest.fromPartial({ scope: principalOf(request).scope }),
      );
      return {
        object: "list",
        data: models.map((model) => ({
          id: model.modelId,
          object: "model",
          created: Number(model.created),
          owned_by: model.ownedBy,
          name: model.modelAlias,
          provider: model.provider,
          context_window: Number(model.contextWindow),
        })),
      };
    },
  );
}
