import type { FastifyInstance, FastifyRequest } from "fastify";
import { ListModelsRequest, type ModelInfo } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { integer, listOf, object, replies, string } from "./response-schemas.ts";

/** One model in OpenAI's shape, plus our alias, provider and context window. */
const renderModel = (model: ModelInfo) => ({
  id: model.modelId,
  object: "model",
  created: Number(model.created),
  owned_by: model.ownedBy,
  name: model.modelAlias,
  provider: model.provider,
  context_window: Number(model.contextWindow),
  kind: model.kind || "chat",
});

const modelSchema = object({
  id: string(),
  object: string("`model`"),
  created: integer(),
  owned_by: string(),
  name: string("The model's alias"),
  provider: string(),
  context_window: integer(),
  kind: string("`chat` (chat completions and the APIs translated onto them) or `embedding` (/v1/embeddings)"),
  alias_for: string("Only on an alias (MODEL_ALIASES): the model that serves it"),
});

/**
 * The operator's aliases (MODEL_ALIASES) of models the key may call, each shown as a model of its
 * own with the model it is served by: a client that checks the list for its configured name (a
 * coding agent's default) finds it. Prefix patterns (`claude-*`) name no one model and are left out.
 */
function aliasEntries(deps: RouteDeps, models: readonly ModelInfo[]) {
  return deps.routing.aliases.entries.flatMap(({ name, target }) => {
    if (name.endsWith("*")) return [];
    const folded = target.toLowerCase();
    const model = models.find((m) => m.modelId.toLowerCase() === folded || m.modelAlias.toLowerCase() === folded);
    if (!model || models.some((m) => m.modelId.toLowerCase() === name.toLowerCase())) return [];
    return [{ ...renderModel(model), id: name, name, alias_for: model.modelId }];
  });
}

/** GET /v1/models and /v1/models/{model}: the models the key may call, in OpenAI's shapes. */
export function modelRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const modelsOf = async (request: FastifyRequest) => {
    const scope = principalOf(request).scope;
    return (await deps.backends.registry.listModels(ListModelsRequest.fromPartial({ scope }))).models;
  };

  app.get(
    "/v1/models",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "List the models your key may call",
        tags: ["chat"],
        security: [{ apiKey: [] }],
        response: replies(200, listOf(modelSchema)),
      },
    },
    async (request) => {
      const models = await modelsOf(request);
      return { object: "list", data: [...models.map(renderModel), ...aliasEntries(deps, models)] };
    },
  );

  // The openai SDK's `models.retrieve(id)`. Only ids the key may call are found (as in the list,
  // the operator's aliases included); a model's own alias is not an id here, as OpenAI's own
  // endpoint knows no aliases.
  app.get<{ Params: { model: string } }>(
    "/v1/models/:model",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "One model your key may call",
        response: replies(200, modelSchema),
        tags: ["chat"],
        security: [{ apiKey: [] }],
        params: { type: "object", properties: { model: { type: "string", minLength: 1, maxLength: 256 } } },
      },
    },
    async (request) => {
      const id = request.params.model;
      const models = await modelsOf(request);
      const model = models.find((m) => m.modelId === id);
      if (model) return renderModel(model);
      const aliased = aliasEntries(deps, models).find((m) => m.id.toLowerCase() === id.toLowerCase());
      if (!aliased) throw new AppError("model_not_found", `The model \`${id}\` does not exist.`, { param: "model" });
      return aliased;
    },
  );
}
