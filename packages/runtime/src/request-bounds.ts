/**
 * Room between a request's admission on a lease and the start of its upstream call (its prompt
 * counted, a grant awaited): an edge cuts an upstream call at billing's MAX_REQUEST_MS − this, so
 * a request admitted on a lease never runs past the MAX_REQUEST_MS its final report is held for.
 */
export const ADMISSION_MARGIN_MS = 10_000;

/**
 * The longest an edge lets one upstream call run: its own UPSTREAM_TOTAL_TIMEOUT_MS, clamped to
 * billing's MAX_REQUEST_MS − ADMISSION_MARGIN_MS (docs/leases.md#settings).
 */
export function upstreamTotalMs(upstreamTotalTimeoutMs: number, maxRequestMs: number): number {
  return Math.min(upstreamTotalTimeoutMs, maxRequestMs - ADMISSION_MARGIN_MS);
}
