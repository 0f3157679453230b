import { Route, type RouteScope } from "@mkt/proto/registry/v1/registry";
import type { ConfiguredModel } from "./configured-models.ts";
import {
  isScoped,
  type CatalogModel,
  type EjectionView,
  type ModelCatalog,
  type UpstreamTarget,
} from "./model-catalog.ts";

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

const serverName = (url: string) => {
  const parsed = new URL(url);
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, "")}`;
};

/**
 * How to call one platform model on one of the operator's servers. Shared by this catalog and
 * the routing table registry streams to the edges, so both name a server's ejection key alike.
 */
export function platformUpstream(
  provider: PlatformProvider,
  server: PlatformServer,
  model: ConfiguredModel,
): UpstreamTarget {
  return {
    baseUrl: server.url,
    token: server.token,
    upstreamModel: model.upstreamModel,
    trust: "platform",
    // Per model: a server whose one model is broken keeps serving the others. Logged, so
    // origin and path only (never credentials a URL might hold).
    key: `${provider} ${serverName(server.url)} ${model.modelId}`,
  };
}

/**
 * Platform-served models from configuration, served by the servers the operator configured (the
 * local model server's replicas, or the cloud API): every server serves every model, and they are
 * tried in the configured order. They are called through the ordinary (unguarded) upstream pools,
 * since the operator chose the addresses. A server's token lives only in the upstream targets,
 * which never leave the registry: routes and listings carry no URL or token. A model is listed as
 * unhealthy (routing answers no_healthy_upstream, and `auto` passes over it) while every one of
 * its servers is ejected.
 */
export function platformCatalog(
  provider: PlatformProvider,
  models: readonly ConfiguredModel[],
  servers: readonly PlatformServer[],
  createdAt: Date,
  outliers: EjectionView = { isEjected: () => false },
): ModelCatalog {
  const created = BigInt(Math.floor(createdAt.getTime() / 1000));
  const entries = models.map((m) => ({
    modelId: m.modelId,
    modelAlias: m.modelAlias,
    ownedBy: "platform",
    created,
    route: Route.fromPartial({
      modelId: m.modelId,
      provider,
      inputPricePer1mMicros: m.inputPricePer1mMicros,
      outputPricePer1mMicros: m.outputPricePer1mMicros,
      contextWindow: m.contextWindow,
      maxOutputTokensCap: PLATFORM_MAX_OUTPUT_TOKENS,
    }),
    upstreams: servers.map((server) => platformUpstream(provider, server, m)),
  }));
  const byId = new Map(entries.map((e) => [e.modelId, e]));

  return {
    // Platform models are for normal keys; a scoped key only reaches its hoster's models.
    async models(scope: RouteScope | undefined): Promise<CatalogModel[]> {
      if (isScoped(scope)) return [];
      // Servers are not probed (the operator runs them): only live failures eject one.
      return entries.map(({ upstreams, ...model }) => ({
        ...model,
        healthy: upstreams.some((u) => !outliers.isEjected(u.key)),
      }));
    },
    async candidatesFor(route: Route): Promise<UpstreamTarget[]> {
      if (route.provider !== provider) return [];
      return byId.get(route.modelId)?.upstreams ?? [];
    },
  };
}
