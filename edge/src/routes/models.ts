import type { FastifyInstance, FastifyRequest } from "fastify";
import {
  ListEndpointsRequest,
  ListModelsRequest,
  type ModelEndpoint,
  type ModelInfo,
} from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import { microsToUsd } from "@mkt/runtime/money";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { productSchema, renderProduct } from "../products/render-product.ts";
import { renderStats, renderVerification, statsSchema, verificationSchema } from "./endpoint-stats.ts";
import { arrayOf, integer, listOf, object, replies, string, usd } from "./response-schemas.ts";
import { pricingSchema, renderPricing } from "./model-pricing.ts";

/**
 * One model in OpenAI's shape, plus our alias, provider and context window; an open model (provider
 * `open`, called by its canonical_id) with how many endpoints serve it and their lowest prices.
 * A platform or open model has OpenRouter's `pricing` (an open model's each its endpoints' lowest);
 * a scoped key's hoster model has none, as its plan prices it.
 */
const renderModel = (model: ModelInfo) => ({
  id: model.modelId,
  object: "model",
  created: Number(model.created),
  owned_by: model.ownedBy,
  name: model.modelAlias,
  provider: model.provider,
  context_window: Number(model.contextWindow),
  kind: model.kind || "chat",
  ...(model.provider !== "hoster" && {
    pricing: renderPricing({
      input: model.lowestInputPricePer1mMicros,
      output: model.lowestOutputPricePer1mMicros,
      cachedInput: model.lowestCachedInputPricePer1mMicros,
    }),
  }),
  ...(model.provider === "open" && {
    endpoints: Number(model.endpoints),
    lowest_input_price_per_1m_usd: microsToUsd(model.lowestInputPricePer1mMicros),
    lowest_output_price_per_1m_usd: microsToUsd(model.lowestOutputPricePer1mMicros),
    lowest_cached_input_price_per_1m_usd: microsToUsd(model.lowestCachedInputPricePer1mMicros),
  }),
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
  pricing: pricingSchema(
    "On a platform model (provider `local` or `cloud`) its prices; on an open model each the lowest among its " +
      "endpoints. Absent on a hoster's model, which its plan prices",
  ),
  endpoints: integer(
    "Only on an open model (provider `open`): the endpoints serving it (GET /v1/models/{id}/endpoints)",
  ),
  lowest_input_price_per_1m_usd: usd("Only on an open model: the lowest input price among its endpoints"),
  lowest_output_price_per_1m_usd: usd("Only on an open model: the lowest output price among its endpoints"),
  lowest_cached_input_price_per_1m_usd: usd(
    "Only on an open model: the lowest cached-input price among its endpoints (an endpoint without one at its " +
      "input price)",
  ),
});

/**
 * One endpoint of a public model: the hoster, its model as registered, and the open plan whose
 * prices and limits apply (a request's context is the smaller of the model's and the plan's).
 */
const renderEndpoint = (e: ModelEndpoint) => {
  const plan = renderProduct(e.plan!);
  const terms = e.plan?.terms;
  const prices = {
    input: terms?.inputPricePer1mMicros ?? 0n,
    output: terms?.outputPricePer1mMicros ?? 0n,
    cachedInput: terms?.cachedInputPricePer1mMicros,
  };
  const contextWindow = Number(e.model?.contextWindow ?? 0n);
  return {
    hoster_id: e.hosterId,
    hoster_name: e.hosterName,
    status: e.hosterStatus,
    model_id: e.model?.modelId ?? "",
    quantization: e.model?.quantization || "unknown",
    context_window: Math.min(contextWindow, plan.max_context_tokens),
    max_output_tokens: plan.max_output_tokens,
    input_price_per_1m_usd: plan.input_price_per_1m_usd,
    output_price_per_1m_usd: plan.output_price_per_1m_usd,
    cached_input_price_per_1m_usd: microsToUsd(prices.cachedInput ?? prices.input),
    pricing: renderPricing(prices),
    stats: renderStats(e.model?.stats),
    verification: renderVerification(e.model?.verification),
    plan,
  };
};

const endpointsSchema = object({
  data: object({
    id: string("The model's public name (canonical_id)"),
    endpoints: arrayOf(
      object({
        hoster_id: string(),
        hoster_name: string(),
        status: string("The hoster's health: `healthy` or `unhealthy`"),
        model_id: string("The hoster's own name for the model"),
        quantization: string("`bf16`, `fp8`, `int4`, `q4_k_m`, ... or `unknown`"),
        context_window: integer("Tokens: the smaller of the model's context and the plan's max_context_tokens"),
        max_output_tokens: integer(),
        input_price_per_1m_usd: usd("The plan's, 0 on a free plan"),
        output_price_per_1m_usd: usd("The plan's, 0 on a free plan"),
        cached_input_price_per_1m_usd: usd(
          "What an input token the upstream served from its prompt cache costs: the plan's cached price, or its " +
            "input price where it sets none",
        ),
        pricing: pricingSchema("The same prices in OpenRouter's form"),
        stats: statsSchema,
        verification: verificationSchema,
        plan: productSchema,
      }),
      "Cheapest first (input plus output price), then by hoster name",
    ),
  }),
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

  // OpenRouter's endpoints list: an `author/slug` id is two path segments, a plain id one.
  const endpointsOf = async (id: string) => {
    const { endpoints } = await deps.backends.registry.listEndpoints(
      ListEndpointsRequest.fromPartial({ canonicalId: id }),
    );
    return { data: { id: endpoints[0]?.model?.canonicalId ?? id, endpoints: endpoints.map(renderEndpoint) } };
  };
  const endpointsRoute = {
    onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
    schema: {
      summary: "The endpoints of an open model: each hoster serving it on an open plan, with prices and limits",
      description:
        "`canonical_id` is the model's public name, shared by every hoster serving it (a Hugging Face repository " +
        "id such as `meta-llama/Llama-3.1-8B-Instruct`, whose `/` makes it two path segments). Each endpoint is a " +
        "hoster's model on one of its open plans; a model no open plan serves is 404 `model_not_found`.",
      response: replies(200, endpointsSchema),
      tags: ["chat"],
      security: [{ apiKey: [] }],
    },
  };
  const segment = { type: "string", minLength: 1, maxLength: 128 } as const;
  app.get<{ Params: { id: string } }>(
    "/v1/models/:id/endpoints",
    {
      ...endpointsRoute,
      schema: { ...endpointsRoute.schema, params: { type: "object", properties: { id: segment } } },
    },
    async (request) => endpointsOf(request.params.id),
  );
  app.get<{ Params: { author: string; slug: string } }>(
    "/v1/models/:author/:slug/endpoints",
    {
      ...endpointsRoute,
      schema: {
        ...endpointsRoute.schema,
        params: { type: "object", properties: { author: segment, slug: segment } },
      },
    },
    async (request) => endpointsOf(`${request.params.author}/${request.params.slug}`),
  );

  // The openai SDK's `models.retrieve(id)`. Only ids the key may call are found (as in the list,
  // the operator's aliases included); a model's own alias is not an id here, as OpenAI's own
  // endpoint knows no aliases.
  const oneModel = async (request: FastifyRequest, id: string) => {
    const models = await modelsOf(request);
    const model = models.find((m) => m.modelId === id);
    if (model) return renderModel(model);
    const aliased = aliasEntries(deps, models).find((m) => m.id.toLowerCase() === id.toLowerCase());
    if (!aliased) throw new AppError("model_not_found", `The model \`${id}\` does not exist.`, { param: "model" });
    return aliased;
  };
  const oneModelSchema = {
    summary: "One model your key may call",
    response: replies(200, modelSchema),
    tags: ["chat"],
    security: [{ apiKey: [] }],
  };
  app.get<{ Params: { model: string } }>(
    "/v1/models/:model",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        ...oneModelSchema,
        params: { type: "object", properties: { model: { type: "string", minLength: 1, maxLength: 256 } } },
      },
    },
    (request) => oneModel(request, request.params.model),
  );
  // An open model's `author/slug` id, as the openai SDK sends it (two path segments).
  app.get<{ Params: { author: string; slug: string } }>(
    "/v1/models/:author/:slug",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: { ...oneModelSchema, params: { type: "object", properties: { author: segment, slug: segment } } },
    },
    (request) => oneModel(request, `${request.params.author}/${request.params.slug}`),
  );
}
