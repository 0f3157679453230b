import type { Route, RouteScope } from "@mkt/proto/registry/v1/registry";

/**
 * Who runs an upstream server: `platform` servers are configured by the operator (the local model
 * server, the cloud API) and called as they are; `hoster` servers belong to third parties and are
 * called only through the guarded connector, which refuses private and metadata addresses at
 * connect time.
 */
export type UpstreamTrust = "platform" | "hoster";

/** Where and how to call a model: the server's base URL, its bearer token and its model name. */
export interface UpstreamTarget {
  /** Base URL of an OpenAI-compatible server; `/v1/chat/completions` is appended. */
  baseUrl: string;
  token: string;
  upstreamModel: string;
  trust: UpstreamTrust;
  /**
   * Names the server for outlier ejection (OutlierTracker): `<provider> <url> <model id>` for a
   * platform server's model, `hoster <id>` for a hoster (its health probe clears it). Never holds the token.
   */
  key: string;
}

/** Whether an upstream is ejected for now (OutlierTracker); catalogs only read it. */
export interface EjectionView {
  isEjected(key: string): boolean;
}

/** A callable model: its public listing and the route billing prices it by. */
export interface CatalogModel {
  modelId: string;
  modelAlias: string;
  ownedBy: string;
  /** Unix seconds. */
  created: bigint;
  /** False while its server is marked unhealthy: listed, but calls are refused (no_healthy_upstream). */
  healthy: boolean;
  route: Route;
}

/**
 * A source of models. Local and cloud models come from configuration, hosters' models from the
 * database. Each catalog decides which callers see its models (local and cloud: normal keys only;
 * hosters: only a scope's own hoster).
 */
export interface ModelCatalog {
  /** Models a caller with this scope (none for a normal key) may call, in routing order. */
  models(scope: RouteScope | undefined): Promise<CatalogModel[]>;
  /**
   * The upstream servers able to serve a route previously resolved from this catalog now, in the
   * order to try them: each serves the route's very model at the route's price (failover never
   * changes the price the edge admitted the request at). Ejected servers are included (the caller skips them);
   * empty when the model is gone, its hoster is unhealthy, or the route is another catalog's.
   */
  candidatesFor(route: Route): Promise<UpstreamTarget[]>;
}

/** True when a request carries a subscription scope (a scoped key). */
export function isScoped(scope: RouteScope | undefined): boolean {
  return !!scope && (scope.subscriptionId !== "" || scope.productId !== "" || scope.hosterId !== "");
}

/**
 * The catalogs in routing order as one: models are concatenated (each catalog applies its own
 * scope rule, so a scoped key never sees local or cloud models), and a route's upstreams come from
 * the first catalog that knows it.
 */
export function compositeCatalog(...catalogs: ModelCatalog[]): ModelCatalog {
  return {
    async models(scope) {
      const lists = await Promise.all(catalogs.map((c) => c.models(scope)));
      return lists.flat();
    },
    async candidatesFor(route) {
      for (const catalog of catalogs) {
        const targets = await catalog.candidatesFor(route);
        if (targets.length > 0) return targets;
      }
      return [];
    },
  };
}
