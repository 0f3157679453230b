import { modelNotFound, noHealthyUpstream } from "@mkt/runtime/route-errors";
import type { RouteScope } from "@mkt/proto/registry/v1/registry";
import type { CatalogModel, ModelCatalog } from "./model-catalog.ts";

/**
 * Resolves a client's model name among the models the caller may use: exact model id first, then
 * alias, then model id, both case-insensitively; "auto" picks the first healthy model. A match
 * whose server is unhealthy (or "auto" when none is healthy) is no_healthy_upstream; anything
 * the caller may not use is model_not_found, whether or not it exists elsewhere.
 */
export async function resolveModel(
  catalog: ModelCatalog,
  model: string,
  scope: RouteScope | undefined,
): Promise<CatalogModel> {
  const models = await catalog.models(scope);
  const folded = model.toLowerCase();
  const match =
    models.find((m) => m.modelId === model) ??
    models.find((m) => m.modelAlias !== "" && m.modelAlias.toLowerCase() === folded) ??
    models.find((m) => m.modelId.toLowerCase() === folded);
  if (match) {
    if (!match.healthy) throw noHealthyUpstream(match.modelId);
    return match;
  }
  if (folded === "auto" && models.length > 0) {
    const healthy = models.find((m) => m.healthy);
    if (!healthy) throw noHealthyUpstream(model);
    return healthy;
  }
  throw modelNotFound(model);
}
