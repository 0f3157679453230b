/** The account's request resources a lease holds room in, each counted in `rate_counters`. */
export const REQUEST_WINDOWS = [
  { resource: "requests_minute", counter: "minute", lengthMs: 60_000 },
  { resource: "requests_day", counter: "day", lengthMs: 86_400_000 },
] as const;

export type RequestWindow = (typeof REQUEST_WINDOWS)[number];

export interface WindowSpan {
  start: Date;
  end: Date;
}

/**
 * The UTC window holding `now`, and the next one when it starts within one TTL: the last
 * heartbeat before a boundary carries the next window's room
 * (docs/leases.md#the-path-of-a-chat-request).
 */
export function windowsOf(
  window: { lengthMs: number },
  now: Date,
  ttlMs: number,
): { current: WindowSpan; next?: WindowSpan } {
  const startMs = Math.floor(now.getTime() / window.lengthMs) * window.lengthMs;
  const endMs = startMs + window.lengthMs;
  const current = { start: new Date(startMs), end: new Date(endMs) };
  if (endMs - now.getTime() > ttlMs) return { current };
  return { current, next: { start: new Date(endMs), end: new Date(endMs + window.lengthMs) } };
}
