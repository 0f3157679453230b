import { Route, type RouteScope } from "@mkt/proto/registry/v1/registry";
import type { ConfiguredModel } from "./configured-models.ts";
import { isScoped, type CatalogModel, type ModelCatalog, type UpstreamTarget } from "./model-catalog.ts";

/** Platform models (local and cloud) are capped at this many output tokens per request (DESIGN.md §4). */
export const PLATFORM_MAX_OUTPUT_TOKENS = 4096n;

/**
 * Who serves a platform model: `local` is the operator's local model server (LOCAL_MODELS),
 * `cloud` a cloud API the operator pays for (CLOUD_MODELS). Billing treats both as platform
 * revenue: the customer pays the catalog price, no hoster earns a share.
 */
export type PlatformProvider = "local" | "cloud";

/** An operator-configured OpenAI-compatible server and the bearer token it takes. */
export interface PlatformServer {
  /** Base URL; `/v1/chat/completions` is appended. */
  url: string;
  token: string;
}

/**
 * Platform-served models from configuration, all behind one server the operator configured: the
 * local model server or the cloud API. They are called through the ordinary (unguarded) upstream
 * pools, since the operator chose the address. The server's token lives only in the upstream
 * target, which never leaves the registry: routes and listings carry no URL or token.
 */
export function platformCatalog(
  provider: PlatformProvider,
  models: readonly ConfiguredModel[],
  server: PlatformServer,
  createdAt: Date,
): ModelCatalog {
  const created = BigInt(Math.floor(createdAt.getTime() / 1000));
  const entries: Array<CatalogModel & { upstream: UpstreamTarget }> = models.map((m) => ({
    modelId: m.modelId,
    modelAlias: m.modelAlias,
    ownedBy: "platform",
    created,
    // The server's health is the operator's business (it is not probed): a failing call is a 502.
    healthy: true,
    route: Route.fromPartial({
      modelId: m.modelId,
      provider,
      inputPricePer1mMicros: m.inputPricePer1mMicros,
      outputPricePer1mMicros: m.outputPricePer1mMicros,
      contextWindow: m.contextWindow,
      maxOutputTokensCap: PLATFORM_MAX_OUTPUT_TOKENS,
    }),
    upstream: { baseUrl: server.url, token: server.token, upstreamModel: m.upstreamModel, trust: "platform" },
  }));
  const byId = new Map(entries.map((e) => [e.modelId, e]));

  return {
    // Platform models are for normal keys; a scoped key only reaches its hoster's models.
    async models(scope: RouteScope | undefined) {
      return isScoped(scope) ? [] : entries;
    },
    async upstreamFor(route: Route): Promise<UpstreamTarget | undefined> {
      if (route.provider !== provider) return undefined;
      return byId.get(route.modelId)?.upstream;
    },
  };
}
