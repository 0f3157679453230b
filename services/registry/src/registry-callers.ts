import type { CallerTable } from "@mkt/runtime/caller-policy";
import type { RegistryServiceServer } from "@mkt/proto/registry/v1/registry";

/**
 * Who may call each RegistryService RPC (enforced with mTLS on: packages/runtime/src/caller-policy.ts).
 * The edge serves the public routes; billing reads plans for the subscription
 * saga (GetProduct) and the hoster's earnings (ListProducts).
 */
export const REGISTRY_CALLERS = {
  listModels: ["edge"],
  // The routing table carries upstream tokens: the edge alone may hold them.
  watchCatalog: ["edge"],
  registerHoster: ["edge"],
  getHoster: ["edge"],
  listHosters: ["edge"],
  listEndpoints: ["edge"],
  updateHosterModel: ["edge"],
  createProduct: ["edge"],
  listProducts: ["edge", "billing"],
  getProduct: ["billing"],
  updateProduct: ["edge"],
  archiveProduct: ["edge"],
  // The operator's admin routes on the edge (GET /admin/usage/dead-letters?service=registry).
  listUsageDeadLetters: ["edge"],
  replayUsageDeadLetters: ["edge"],
} as const satisfies CallerTable<RegistryServiceServer>;
