import { hostname } from "node:os";

/**
 * An edge's id is a NATS subject token (billing recalls leases on `leases.recall.<edge_id>`), so
 * only letters, digits, `_` and `-`.
 */
export const EDGE_ID_PATTERN = /^[A-Za-z0-9_-]{1,100}$/;

/**
 * EDGE_ID's default: the host name and the port, any other character made a `-`. It stays the same
 * when the process restarts on the same host and port, so billing knows the restarted process as
 * the same edge (its next incarnation) and releases what the dead one held at once.
 */
export function defaultEdgeId(port: number, host = hostname()): string {
  return `${host}-${port}`.replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 100);
}
