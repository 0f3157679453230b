import { createHash } from "node:crypto";

/** 2^52: the hash keeps 52 bits, so that (n + 0.5) / 2^52 is exact and never rounds to 0 or 1. */
const SPAN = 2 ** 52;

/**
 * The hash of (key, id) as a number strictly between 0 and 1, the same on every process: the
 * first 52 bits of SHA-256, centred in their interval. A logarithm of it is always finite.
 */
export function rendezvousUnit(key: string, id: string): number {
  const digest = createHash("sha256").update(key).update("\0").update(id).digest();
  const bits = digest.readUIntBE(0, 6) * 16 + (digest[6]! >> 4);
  return (bits + 0.5) / SPAN;
}

/**
 * Weighted rendezvous hashing (docs/adr/0038-sticky-conversations-by-rendezvous-hashing.md):
 * `items` ordered by the score −weight / ln(h), highest first, `h` each item's `rendezvousUnit`
 * with `key`. Over random keys an item comes first with probability weight / Σweight, and the
 * whole order is distributed as weighted draws without replacement (−ln h is an exponential
 * variable, so the order is that of exponential races at rates proportional to the weights). A
 * key's order depends only on the items themselves: removing one leaves the others' relative order
 * as it was. Weights must be positive; ties (equal scores) keep the input order.
 */
export function rendezvousOrder<T>(
  items: readonly T[],
  key: string,
  idOf: (item: T) => string,
  weightOf: (item: T) => number,
): T[] {
  const scored = items.map((item) => ({ item, score: -weightOf(item) / Math.log(rendezvousUnit(key, idOf(item))) }));
  return scored.sort((a, b) => b.score - a.score).map((s) => s.item);
}
