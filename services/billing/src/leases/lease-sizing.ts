/**
 * What the sizing rule needs for one resource (docs/leases.md#how-much-room-an-edge-gets), all in
 * that resource's unit.
 */
export interface SizingInput {
  /** Free for the account now, plus what this lease already holds unspent. */
  left: bigint;
  /** Edges that used the account in the last 2 TTL (this one included; at least 1). */
  edges: number;
  /** This edge's demand per second (rounded up by the edge). */
  demandPerSecond: bigint;
  /** The request in hand (0 for a heartbeat's growth). */
  inHand: bigint;
  ttlMs: number;
}

/**
 * The unspent room a lease should hold after a grant: `min(left, max(w, min(d × 2 × TTL, left / n)))`.
 * Enough for two TTLs of demand, so a lease grows about once per heartbeat under steady load, but
 * never more than an even share of what is left, so edges sharing an account cannot starve each
 * other; and never less than the request in hand, so a small share (`left < n`) still admits one
 * request at a time, which is exact for rpm 10 or a 0.01 USD balance. Callers refuse a request
 * when `left < w`: the result is then `left`, which does not cover it.
 */
export function leaseTarget({ left, edges, demandPerSecond, inHand, ttlMs }: SizingInput): bigint {
  if (left <= 0n) return 0n;
  const n = BigInt(Math.max(1, edges));
  // d × 2 × TTL, rounded up: a demand of one unit per second asks for at least one unit.
  const forDemand = (demandPerSecond * 2n * BigInt(ttlMs) + 999n) / 1000n;
  const share = left / n;
  const wanted = forDemand < share ? forDemand : share;
  const target = inHand > wanted ? inHand : wanted;
  return target < left ? target : left;
}

/** How much to add to a lease holding `remaining` unspent to reach its target (never negative). */
export function growthFor(input: SizingInput, remaining: bigint): bigint {
  const target = leaseTarget({ ...input, left: input.left + remaining });
  return target > remaining ? target - remaining : 0n;
}
