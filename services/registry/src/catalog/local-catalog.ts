import { Route, type RouteScope } from "@mkt/proto/registry/v1/registry";
import type { LocalModel } from "./local-models.ts";
import { isScoped, type CatalogModel, type ModelCatalog, type UpstreamTarget } from "./model-catalog.ts";

/** Platform models are capped at this many output tokens per request (DESIGN.md §4). */
export const LOCAL_MAX_OUTPUT_TOKENS = 4096n;

/** Platform-served models from LOCAL_MODELS, all behind the one local model server. */
export function localCatalog(
  models: readonly LocalModel[],
  server: { url: string; token: string },
  createdAt: Date,
): ModelCatalog {
  const created = BigInt(Math.floor(createdAt.getTime() / 1000));
  const entries: Array<CatalogModel & { upstream: UpstreamTarget }> = models.map((m) => ({
    modelId: m.modelId,
    modelAlias: m.modelAlias,
    ownedBy: "platform",
    created,
    // The local model server's health is the operator's business: a failing call is a 502.
    healthy: true,
    route: Route.fromPartial({
      modelId: m.modelId,
      provider: "local",
      inputPricePer1mMicros: m.inputPricePer1mMicros,
      outputPricePer1mMicros: m.outputPricePer1mMicros,
      contextWindow: m.contextWindow,
      maxOutputTokensCap: LOCAL_MAX_OUTPUT_TOKENS,
    }),
    upstream: { baseUrl: server.url, token: server.token, upstreamModel: m.upstreamModel, trust: "platform" },
  }));
  const byId = new Map(entries.map((e) => [e.modelId, e]));

  return {
    // Local models are for normal keys; a scoped key only reaches its hoster's models.
    async models(scope: RouteScope | undefined) {
      return isScoped(scope) ? [] : entries;
    },
    async upstreamFor(route: Route): Promise<UpstreamTarget | undefined> {
      if (route.provider !== "local") return undefined;
      return byId.get(route.modelId)?.upstream;
    },
  };
}
