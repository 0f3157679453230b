import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { EjectionView, ModelCatalog, UpstreamTarget } from "../catalog/model-catalog.ts";
import type { EjectionProber } from "../upstream/ejection-prober.ts";
import { UpstreamFailure } from "../upstream/stream-chat.ts";

/**
 * Statuses by which an upstream refuses the request itself (a body it cannot take): another
 * server would refuse it too, and counting them would let a caller eject a server at will.
 */
const REQUEST_REFUSED = new Set([400, 413, 422]);

/**
 * True when `err` is the upstream server's fault (an error status, a refused or reset connection,
 * a timeout, a broken stream): it counts towards ejection and, before the first byte reached the
 * caller, moves the request to the next server. A caller's cancel, a request the upstream refused
 * as invalid and the registry's own errors are not.
 */
export function isUpstreamFault(err: unknown): err is UpstreamFailure {
  return (
    err instanceof UpstreamFailure &&
    err.code !== "client_cancelled" &&
    !(err.status !== undefined && REQUEST_REFUSED.has(err.status))
  );
}

/**
 * The servers to try for a route, in order, without the ejected ones. None (the model is gone,
 * its hoster unhealthy, or every server ejected) is no_healthy_upstream (503).
 */
export async function liveCandidates(
  catalog: ModelCatalog,
  outliers: EjectionView,
  route: Route,
): Promise<UpstreamTarget[]> {
  const live = (await catalog.candidatesFor(route)).filter((t) => !outliers.isEjected(t.key));
  if (live.length === 0) {
    throw new AppError("no_healthy_upstream", `No upstream is available for the model \`${route.modelId}\`.`);
  }
  return live;
}

/** What the failover loop needs besides the routes: the catalog, ejections and a log. */
export interface FailoverDeps {
  catalog: ModelCatalog;
  outliers: EjectionView & { failed(key: string): boolean; succeeded(key: string): void };
  /** Probes a route's ejected servers so a restarted sole upstream takes calls within seconds. */
  revival?: Pick<EjectionProber, "ejected">;
  log: Logger;
}

/**
 * Relays a request through the first server that answers: each route's live servers in order
 * (failover, same model and price), then the next route (the client's `models` fallbacks, priced
 * within the worst case the edge admitted for all of them). It moves on only from a failure that
 * is the server's fault (a route with no live server counts as one) and only while nothing has
 * reached the caller (`reachedCaller`); otherwise the failure is the caller's answer, and a
 * cancelled call stops at once. `attempt` relays from one server, told which route it serves
 * (the one the usage event names).
 */
export async function relayThroughFirstAnswer(
  deps: FailoverDeps,
  routes: readonly Route[],
  attempt: (route: Route, target: UpstreamTarget) => Promise<void>,
  progress: { cancelled: AbortSignal; reachedCaller: () => boolean },
): Promise<void> {
  for (const [r, route] of routes.entries()) {
    const lastRoute = r === routes.length - 1;
    let targets: UpstreamTarget[];
    try {
      targets = await liveCandidates(deps.catalog, deps.outliers, route);
    } catch (err) {
      if (lastRoute || !(err instanceof AppError) || err.code !== "no_healthy_upstream") throw err;
      deps.log.warn({ modelId: route.modelId }, "no live upstream for the model; trying the next model");
      continue;
    }
    for (const [i, target] of targets.entries()) {
      try {
        await attempt(route, target);
        deps.outliers.succeeded(target.key);
        if (i > 0 || r > 0) deps.log.info({ upstream: target.key, modelId: route.modelId }, "served after failover");
        return;
      } catch (err) {
        if (progress.cancelled.aborted || !isUpstreamFault(err)) throw err;
        if (deps.outliers.failed(target.key)) {
          deps.log.warn({ upstream: target.key }, "upstream ejected after failures");
          // Not awaited: the caller's answer does not wait for the model's other servers.
          deps.revival
            ?.ejected(route)
            .catch((probeErr: unknown) => deps.log.warn({ err: probeErr }, "probing ejected upstreams failed"));
        }
        if (progress.reachedCaller() || (lastRoute && i === targets.length - 1)) throw err;
        deps.log.warn(
          { upstream: target.key, code: err.code },
          "upstream failed before the first byte; trying the next",
        );
      }
    }
  }
}
