import type { RouteScope } from "@mkt/proto/registry/v1/registry";

/** A model a caller may call, as ListModels lists it. */
export interface CatalogModel {
  modelId: string;
  modelAlias: string;
  /** local | hoster | cloud */
  provider: string;
  ownedBy: string;
  /** Unix seconds. */
  created: bigint;
  contextWindow: bigint;
  /** chat | embedding */
  kind: string;
  /** A platform model's prices, or an open model's lowest among its endpoints; none for a hoster's model. */
  prices?: CatalogPrices;
  /** How many endpoints serve an open model. */
  open?: { endpoints: bigint };
}

/**
 * Prices in micro-USD per 1M tokens, each its own minimum for an open model. The cached price is
 * the effective one: a model or endpoint that sets none charges its input price for cached tokens.
 */
export interface CatalogPrices {
  inputPricePer1mMicros: bigint;
  outputPricePer1mMicros: bigint;
  cachedInputPricePer1mMicros: bigint;
}

/**
 * A source of models. Local and cloud models come from configuration, hosters' models from the
 * database. Each catalog decides which callers see its models (local and cloud: normal keys only;
 * hosters: only a scope's own hoster).
 */
export interface ModelCatalog {
  /** Models a caller with this scope (none for a normal key) may call, in routing order. */
  models(scope: RouteScope | undefined): Promise<CatalogModel[]>;
}

/** True when a request carries a subscription scope (a scoped key). */
export function isScoped(scope: RouteScope | undefined): boolean {
  return !!scope && (scope.subscriptionId !== "" || scope.productId !== "" || scope.hosterId !== "");
}

/**
 * The catalogs in routing order as one: models are concatenated (each catalog applies its own
 * scope rule, so a scoped key never sees local or cloud models). Which servers serve a route is
 * the routing table's (catalog-table.ts), which the edges call them from.
 */
export function compositeCatalog(...catalogs: ModelCatalog[]): ModelCatalog {
  return {
    async models(scope) {
      const lists = await Promise.all(catalogs.map((c) => c.models(scope)));
      return lists.flat();
    },
  };
}
