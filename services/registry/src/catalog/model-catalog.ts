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
  /** An open model's endpoints and their lowest prices (micro-USD per 1M tokens). */
  open?: { endpoints: bigint; lowestInputPricePer1mMicros: bigint; lowestOutputPricePer1mMicros: bigint };
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
