import { ResolveRouteRequest, type Route } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import type { RouteDeps } from "../routes/route-deps.ts";
import type { ModelChoice } from "./model-choices.ts";
import type { RouteCache } from "./route-cache.ts";

/** A scoped key's confinement (undefined for an account key), as the route cache keys it. */
type Scope = Parameters<RouteCache["get"]>[1];

/** The same model named twice (by id and by alias) is one candidate. */
const identity = (route: Route) => `${route.provider}/${route.hosterId}/${route.modelId}`;

/**
 * The routes of the models a request names, in its order (DESIGN.md §2 step 2, once per model,
 * from the route cache). Every name must be one the caller may use: an unknown one (or, for a
 * scoped key, another hoster's) is 404 `model_not_found` naming it, even when another would
 * answer. A model registry reports unhealthy is passed over, as a fallback would pass it; when
 * none is left, the first one's `no_healthy_upstream` is the answer.
 */
export async function candidateRoutes(
  deps: Pick<RouteDeps, "routes" | "backends">,
  scope: Scope,
  choices: readonly ModelChoice[],
): Promise<Route[]> {
  const resolved = await Promise.allSettled(
    choices.map(({ name }) =>
      deps.routes.get(name, scope, async () => {
        const found = await deps.backends.registry.resolveRoute(
          ResolveRouteRequest.fromPartial({ model: name, scope }),
        );
        return found.route;
      }),
    ),
  );
  const routes: Route[] = [];
  let unhealthy: AppError | undefined;
  for (const [i, outcome] of resolved.entries()) {
    const choice = choices[i]!;
    if (outcome.status === "fulfilled") {
      if (!outcome.value) throw notFound(choice);
      if (!routes.some((r) => identity(r) === identity(outcome.value!))) routes.push(outcome.value);
      continue;
    }
    const err = outcome.reason;
    if (err instanceof AppError && err.code === "model_not_found") throw notFound(choice, err.message);
    if (err instanceof AppError && err.code === "no_healthy_upstream") {
      unhealthy ??= err;
      continue;
    }
    throw err;
  }
  if (routes.length === 0) throw unhealthy ?? new AppError("no_healthy_upstream", "No model is available.");
  return routes;
}

/** model_not_found for one of the names, with the field that named it. */
function notFound(choice: ModelChoice, message = `The model \`${choice.name}\` does not exist.`): AppError {
  return new AppError("model_not_found", message, { param: choice.param });
}
