import type { CatalogTable } from "@mkt/proto/registry/v1/registry";
import { isScoped, type CatalogModel, type ModelCatalog } from "./model-catalog.ts";

const minimum = (values: bigint[]) => values.reduce((least, v) => (v < least ? v : least));

/**
 * The open models (docs/routing.md), for account keys: each canonical id once, from the routing
 * table the edges follow (so the list names exactly what they route), with its endpoints' count
 * and lowest prices. Owned by the id's author (`acme` of `acme/model`), else `marketplace`.
 */
export function openCatalog(table: () => Promise<CatalogTable>): ModelCatalog {
  return {
    async models(scope) {
      if (isScoped(scope)) return [];
      const { openModels, hosters } = await table();
      const created = new Map(hosters.map((h) => [h.hosterId, h.created]));
      return openModels.map((m): CatalogModel => ({
        modelId: m.canonicalId,
        modelAlias: "",
        provider: "open",
        ownedBy: m.canonicalId.includes("/") ? m.canonicalId.split("/")[0]! : "marketplace",
        created: minimum(m.endpoints.map((e) => created.get(e.hosterId) ?? 0n)),
        contextWindow: m.endpoints.reduce((most, e) => (e.contextWindow > most ? e.contextWindow : most), 0n),
        kind: "chat",
        open: { endpoints: BigInt(m.endpoints.length) },
        prices: {
          inputPricePer1mMicros: minimum(m.endpoints.map((e) => e.inputPricePer1mMicros)),
          outputPricePer1mMicros: minimum(m.endpoints.map((e) => e.outputPricePer1mMicros)),
          cachedInputPricePer1mMicros: minimum(
            m.endpoints.map((e) => e.cachedInputPricePer1mMicros ?? e.inputPricePer1mMicros),
          ),
        },
      }));
    },
  };
}
