/**
 * How long the heartbeat waits after `failures` failed calls in a row: doubling from one beat
 * interval (TTL / 2) up to 4 TTL, each a random 50–100 % of that, so edges that lost billing
 * together do not all come back in the same millisecond.
 */
export function nextBackoffMs(failures: number, ttlMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(4 * ttlMs, (ttlMs / 2) * 2 ** Math.max(0, failures - 1));
  return ceiling * (0.5 + random() / 2);
}
