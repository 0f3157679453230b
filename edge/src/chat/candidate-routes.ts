import type { Route, RouteScope } from "@mkt/proto/registry/v1/registry";
import { AppError } from "@mkt/runtime/errors";
import type { RouteDeps } from "../routes/route-deps.ts";
import { NO_PREFERENCES, type ProviderPreferences } from "../routing/provider-preferences.ts";
import type { ModelChoice } from "./model-choices.ts";

/**
 * How long a request waits for the edge's first routing table (an edge just started, registry
 * slow to answer) before it is refused 503 with retry-after: long enough for registry's first
 * answer, short enough that a client is not left hanging while registry is down.
 */
export const FIRST_TABLE_WAIT_MS = 5_000;

/** The same model named twice (by id and by alias) is one candidate; an open endpoint is one per plan. */
const identity = (route: Route) =>
  `${route.provider}/${route.hosterId}/${route.modelId}/${route.open ? route.productId : ""}`;

/** Which API a model answers: chat completions (and the APIs translated onto them) or embeddings. */
export type ModelKind = "chat" | "embedding";

/** A route's kind (tables from before kinds existed carry none: chat). */
export const kindOf = (route: Route): ModelKind => (route.kind === "embedding" ? "embedding" : "chat");

/** The most choices a route answers (0, from tables before max_n existed, is 1). */
const maxNOf = (route: Route) => (route.maxN > 0n ? route.maxN : 1n);

export interface RouteNeeds {
  /** The API asking: a model of another kind is not found for it. Default chat. */
  kind?: ModelKind;
  /** The choices asked for (`n`); default 1. */
  n?: number;
  /** The request's `provider` object: how an open model's endpoints are chosen and ordered. */
  provider?: ProviderPreferences;
  /** The request's conversation key (routing/sticky-key.ts), asked for only by an open model. */
  stickyKey?: () => string | undefined;
}

/**
 * The routes of the models a request names, in its order, from the routing table registry
 * streams to the edge (no round trip). Every name must be one the caller may use: an unknown one
 * (or, for a scoped key, another hoster's) is 404 `model_not_found` naming it, even when another
 * would answer. A model the table finds unhealthy is passed over, as a fallback would pass it;
 * when none is left, the first one's `no_healthy_upstream` is the answer.
 *
 * A model of another kind than the API asking (an embedding model asked for a chat, a chat model
 * asked for embeddings) is not found for it, a 404 like an unknown name: that API has no such
 * model. A model whose `max_n` is below the `n` asked is passed over too, as answering fewer
 * choices than asked would be a wrong answer; when that leaves none, the request is a 400 naming
 * `n`.
 */
export async function candidateRoutes(
  deps: Pick<RouteDeps, "routing">,
  scope: RouteScope | undefined,
  choices: readonly ModelChoice[],
  needs: RouteNeeds = {},
): Promise<Route[]> {
  await deps.routing.ready(FIRST_TABLE_WAIT_MS);
  const kind = needs.kind ?? "chat";
  const n = BigInt(Math.max(1, needs.n ?? 1));
  const routes: Route[] = [];
  let unhealthy: AppError | undefined;
  let tooManyChoices: AppError | undefined;
  for (const choice of choices) {
    let resolved: Route[];
    try {
      resolved = deps.routing.resolveRoutes(
        choice.name,
        scope,
        kind,
        needs.provider ?? NO_PREFERENCES,
        needs.stickyKey,
      );
    } catch (err) {
      if (err instanceof AppError && err.code === "model_not_found" && err.param === "provider") throw err;
      if (err instanceof AppError && err.code === "model_not_found") {
        throw new AppError("model_not_found", err.message, { param: choice.param });
      }
      if (err instanceof AppError && err.code === "no_healthy_upstream") {
        unhealthy ??= err;
        continue;
      }
      throw err;
    }
    for (const route of resolved) {
      if (kindOf(route) !== kind) {
        throw new AppError(
          "model_not_found",
          kind === "embedding"
            ? `The model '${choice.name}' does not serve embeddings.`
            : `The model '${choice.name}' is an embedding model; call /v1/embeddings.`,
          { param: choice.param },
        );
      }
      if (n > maxNOf(route)) {
        tooManyChoices ??= new AppError(
          "invalid_request",
          `The model '${route.modelId}' answers at most ${maxNOf(route)} choice${maxNOf(route) === 1n ? "" : "s"} per request; n is ${n}.`,
          { param: "n" },
        );
        continue;
      }
      if (!routes.some((r) => identity(r) === identity(route))) routes.push(route);
    }
  }
  if (routes.length === 0) {
    throw tooManyChoices ?? unhealthy ?? new AppError("no_healthy_upstream", "No model is available.");
  }
  return routes;
}
