/**
 * How long before a UTC minute (or day) ends billing grants a lease the next window's room when
 * its edge asks for it ahead (a lease report's `next_window`): up to 5 TTL and 10 s, at least one
 * TTL. Edges with many leases used in a minute spread those reports over this span instead of
 * sending them all in the last heartbeat before the boundary, which made that one heartbeat too
 * large to answer within its timeout.
 *
 * @param ttlMs LEASE_TTL_MS, the same on billing and every edge.
 */
export function nextWindowAheadMs(ttlMs: number): number {
  return Math.max(ttlMs, Math.min(5 * ttlMs, 10_000));
}
