/**
 * How long the owner of a change that must refuse at once waits at most for the edges' acks
 * (docs/architecture.md#revocation-stops-at-once): billing after fencing a lease or budget,
 * accounts after revoking a key. One TTL, in which every edge's own validity for what it holds
 * ends, plus the edge's margin (TTL / 10, as the edge computes it) for the time its last reply
 * spent on the way. ≈ 2.2 s with the default TTL. A missing ack never fails the call: the wait
 * covers it.
 */
export function fenceWaitMs(ttlMs: number): number {
  return ttlMs + Math.max(10, Math.floor(ttlMs / 10));
}
