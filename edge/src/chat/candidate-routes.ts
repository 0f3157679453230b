import type { Route, RouteScope } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import type { RouteDeps } from "../routes/route-deps.ts";
import type { ModelChoice } from "./model-choices.ts";

/**
 * How long a request waits for the edge's first routing table (an edge just started, registry
 * slow to answer) before it is refused 503 with retry-after: long enough for registry's first
 * answer, short enough that a client is not left hanging while registry is down.
 */
export const FIRST_TABLE_WAIT_MS = 5_000;

/** The same model named twice (by id and by alias) is one candidate. */
const identity = (route: Route) => `${route.provider}/${route.hosterId}/${route.modelId}`;

/**
 * The routes of the models a request names, in its order, from the routing table registry
 * streams to the edge (no round trip). Every name must be one the caller may use: an unknown one
 * (or, for a scoped key, another hoster's) is 404 `model_not_found` naming it, even when another
 * would answer. A model the table finds unhealthy is passed over, as a fallback would pass it;
 * when none is left, the first one's `no_healthy_upstream` is the answer.
 */
export async function candidateRoutes(
  deps: Pick<RouteDeps, "routing">,
  scope: RouteScope | undefined,
  choices: readonly ModelChoice[],
): Promise<Route[]> {
  await deps.routing.ready(FIRST_TABLE_WAIT_MS);
  const routes: Route[] = [];
  let unhealthy: AppError | undefined;
  for (const choice of choices) {
    let route: Route;
    try {
      route = deps.routing.resolve(choice.name, scope);
    } catch (err) {
      if (err instanceof AppError && err.code === "model_not_found") {
        throw new AppError("model_not_found", err.message, { param: choice.param });
      }
      if (err instanceof AppError && err.code === "no_healthy_upstream") {
        unhealthy ??= err;
        continue;
      }
      throw err;
    }
    if (!routes.some((r) => identity(r) === identity(route))) routes.push(route);
  }
  if (routes.length === 0) throw unhealthy ?? new AppError("no_healthy_upstream", "No model is available.");
  return routes;
}
