import { serverStream, unary } from "@mkt/runtime/grpc-server";
import type { Logger } from "@mkt/runtime/logger";
import { ListModelsResponse, ModelInfo, type RegistryServiceServer } from "@mkt/proto/registry/v1/registry";
import type { CatalogFeed } from "./catalog/catalog-feed.ts";
import type { ModelCatalog } from "./catalog/model-catalog.ts";
import { getHoster, listHosters, updateHosterModel } from "./hosters/hoster-handlers.ts";
import { listEndpoints } from "./hosters/list-endpoints.ts";
import type { HostersContext } from "./hosters/hosters-context.ts";
import { registerHoster } from "./hosters/register-hoster.ts";
import {
  listUsageDeadLetters,
  replayUsageDeadLetters,
  type UsageDeadLetterContext,
} from "./hosters/usage-dead-letters.ts";
import { archiveProduct, createProduct, getProduct, listProducts, updateProduct } from "./products/product-handlers.ts";

/** The RegistryService gRPC handlers. */
export function registryService(
  deps: { catalog: ModelCatalog; usageDeadLetters: UsageDeadLetterContext },
  hosters: HostersContext,
  catalogFeed: Pick<CatalogFeed, "watch">,
  log: Logger,
): RegistryServiceServer {
  return {
    listModels: unary(log, "ListModels", async (request) => {
      const models = await deps.catalog.models(request.scope);
      return ListModelsResponse.fromPartial({
        models: models.map((m) =>
          ModelInfo.fromPartial({
            modelId: m.modelId,
            modelAlias: m.modelAlias,
            provider: m.provider,
            ownedBy: m.ownedBy,
            contextWindow: m.contextWindow,
            created: m.created,
            kind: m.kind,
            endpoints: m.open?.endpoints,
            // A platform model's own prices travel in the same fields: one price is its lowest.
            lowestInputPricePer1mMicros: m.prices?.inputPricePer1mMicros,
            lowestOutputPricePer1mMicros: m.prices?.outputPricePer1mMicros,
            lowestCachedInputPricePer1mMicros: m.prices?.cachedInputPricePer1mMicros,
          }),
        ),
      });
    }),
    watchCatalog: serverStream(log, "WatchCatalog", (call) => catalogFeed.watch(call)),
    registerHoster: unary(log, "RegisterHoster", (request) => registerHoster(hosters, request)),
    getHoster: unary(log, "GetHoster", (request) => getHoster(hosters, request)),
    listHosters: unary(log, "ListHosters", () => listHosters(hosters)),
    listEndpoints: unary(log, "ListEndpoints", (request) => listEndpoints(hosters, request)),
    updateHosterModel: unary(log, "UpdateHosterModel", (request) => updateHosterModel(hosters, request)),
    createProduct: unary(log, "CreateProduct", (request) => createProduct(hosters, request)),
    listProducts: unary(log, "ListProducts", (request) => listProducts(hosters.products, request)),
    getProduct: unary(log, "GetProduct", (request) => getProduct(hosters.products, request)),
    updateProduct: unary(log, "UpdateProduct", (request) => updateProduct(hosters, request)),
    archiveProduct: unary(log, "ArchiveProduct", (request) => archiveProduct(hosters, request)),
    listUsageDeadLetters: unary(log, "ListUsageDeadLetters", () => listUsageDeadLetters(deps.usageDeadLetters)),
    replayUsageDeadLetters: unary(log, "ReplayUsageDeadLetters", (request) =>
      replayUsageDeadLetters(deps.usageDeadLetters, request),
    ),
  };
}
