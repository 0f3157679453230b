import { AppError } from "@mkt/runtime/errors";
import type { RouteScope } from "@mkt/proto/registry/v1/registry";
import type { CatalogModel, ModelCatalog } from "./model-catalog.ts";

export function modelNotFound(model: string): AppError {
  // Echo the name as OpenAI does, but bounded: the message must not grow with a hostile input.
  const shown = model.length > 200 ? `${model.slice(0, 200)}…` : model;
  return new AppError("model_not_found", `The model \`${shown}\` does not exist or you do not have access to it.`, {
    param: "model",
  });
}

/**
 * Resolves a client's model name: exact model id first, then alias (case-insensitive), and
 * "auto" picks the first model the caller may use.
 */
export async function resolveModel(
  catalog: ModelCatalog,
  model: string,
  scope: RouteScope | undefined,
): Promise<CatalogModel> {
  const models = await catalog.models(scope);
  const exact = models.find((m) => m.modelId === model);
  if (exact) return exact;
  const folded = model.toLowerCase();
  const alias = models.find((m) => m.modelAlias !== "" && m.modelAlias.toLowerCase() === folded);
  if (alias) return alias;
  if (folded === "auto" && models[0]) return models[0];
  throw modelNotFound(model);
}
