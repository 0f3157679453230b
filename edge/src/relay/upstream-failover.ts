import { noHealthyUpstream } from "@mkt/runtime/route-errors";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { EjectionView, UpstreamDirectory, UpstreamTarget } from "../routing/upstream-target.ts";
import { UpstreamFailure } from "./stream-chat.ts";

/**
 * Statuses by which an upstream refuses the request itself (a body it cannot take): another
 * server would refuse it too, and counting them would let a caller eject a server at will.
 */
const REQUEST_REFUSED = new Set([400, 413, 422]);

/**
 * True when `err` is the upstream server's fault (an error status, a refused or reset connection,
 * a timeout, a broken stream): it counts towards ejection and, before the first byte reached the
 * caller, moves the request to the next server. A caller's cancel, a request the upstream refused
 * as invalid and the edge's own errors are not.
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
export function liveCandidates(upstreams: UpstreamDirectory, outliers: EjectionView, route: Route): UpstreamTarget[] {
  const live = upstreams.candidatesFor(route).filter((t) => !outliers.isEjected(t.key));
  if (live.length === 0) {
    throw noHealthyUpstream(route.modelId);
  }
  return live;
}
