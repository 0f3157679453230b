import { UpstreamServer, type RouteScope } from "@mkt/proto/registry/v1/registry";
import type { ConfiguredModel } from "./configured-models.ts";
import { isScoped, type CatalogModel, type ModelCatalog } from "./model-catalog.ts";

/** Platform models (local and cloud) are capped at this many output tokens per request. */
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

const serverName = (url: string) => {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`;
};

/**
 * How the edges call one platform model on one of the operator's servers, as the routing table
 * carries it (catalog-table.ts): `key` names the server for the edges' outlier ejection.
 */
export function platformUpstream(
  provider: PlatformProvider,
  server: PlatformServer,
  model: ConfiguredModel,
): UpstreamServer {
  return UpstreamServer.fromPartial({
    baseUrl: server.url,
    token: server.token,
    upstreamModel: model.upstreamModel,
    trust: "platform",
    // Per model: a server whose one model is broken keeps serving the others. Logged, so
    // origin and path only (never credentials a URL might hold).
    key: `${provider} ${serverName(server.url)} ${model.modelId}`,
  });
}

/**
 * Platform-served models from configuration (the operator's local model server and cloud API),
 * as registry lists them: for normal keys only. Listings carry no URL or token.
 */
export function platformCatalog(
  provider: PlatformProvider,
  models: readonly ConfiguredModel[],
  createdAt: Date,
): ModelCatalog {
  const created = BigInt(Math.floor(createdAt.getTime() / 1000));
  const entries: CatalogModel[] = models.map((m) => ({
    modelId: m.modelId,
    modelAlias: m.modelAlias,
    provider,
    ownedBy: "platform",
    created,
    contextWindow: m.contextWindow,
    kind: m.kind,
    prices: {
      inputPricePer1mMicros: m.inputPricePer1mMicros,
      outputPricePer1mMicros: m.outputPricePer1mMicros,
      cachedInputPricePer1mMicros: m.cachedInputPricePer1mMicros ?? m.inputPricePer1mMicros,
    },
  }));
  return {
    // Platform models are for normal keys; a scoped key only reaches its hoster's models.
    async models(scope: RouteScope | undefined): Promise<CatalogModel[]> {
      return isScoped(scope) ? [] : entries;
    },
  };
}
