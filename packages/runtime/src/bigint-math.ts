/**
 * `Math.min` and `Math.max` for bigints (token counts and micro-USD), which the built-ins do
 * not take.
 */

/** The smallest of its arguments. */
export function min(first: bigint, ...rest: bigint[]): bigint {
  let least = first;
  for (const value of rest) if (value < least) least = value;
  return least;
}

/** The largest of its arguments. */
export function max(first: bigint, ...rest: bigint[]): bigint {
  let most = first;
  for (const value of rest) if (value > most) most = value;
  return most;
}

/** `n`, or 0 when it is negative: what is left, never less than nothing. */
export function max0(n: bigint): bigint {
  return n < 0n ? 0n : n;
}
