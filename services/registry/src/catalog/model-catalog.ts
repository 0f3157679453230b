import type { Route, RouteScope } from "@mkt/proto/registry/v1/registry";

/** Where and how to call a model: the server's base URL, its bearer token and its model name. */
export interface UpstreamTarget {
  /** Base URL of an OpenAI-compatible server; `/v1/chat/completions` is appended. */
  baseUrl: string;
  token: string;
  upstreamModel: string;
}

/** A callable model: its public listing, the route billing prices it by, and its upstream. */
export interface CatalogModel {
  modelId: string;
  modelAlias: string;
  ownedBy: string;
  /** Unix seconds. */
  created: bigint;
  route: Route;
  upstream: UpstreamTarget;
}

/**
 * A source of models. Local models come from configuration; hosters (DB-backed) and cloud
 * models join later as further catalogs behind this same interface.
 */
export interface ModelCatalog {
  /** Models a caller with this scope (none for a normal key) may call, in routing order. */
  models(scope: RouteScope | undefined): Promise<CatalogModel[]>;
  /** The upstream serving a route previously resolved from this catalog, if it still exists. */
  upstreamFor(route: Route): Promise<UpstreamTarget | undefined>;
}

/** True when a request carries a subscription scope (a scoped key). */
export function isScoped(scope: RouteScope | undefined): boolean {
  return !!scope && (scope.subscriptionId !== "" || scope.productId !== "" || scope.hosterId !== "");
}
