/**
 * How often a key's spend limit starts afresh (docs/adr/0020-key-spend-limits-in-billing.md): UTC
 * windows, or never.
 */
export type LimitReset = "daily" | "weekly" | "monthly" | null;

export const LIMIT_RESETS = ["daily", "weekly", "monthly"] as const;

export interface KeyWindow {
  start: Date;
  /** The first instant of the next window (far in the future for a limit that never resets). */
  end: Date;
}

const DAY_MS = 86_400_000;
/**
 * A window that never resets still needs bounds: lease rooms and spend sums are read by window.
 * From the epoch to year 9999, which Postgres and Date both hold.
 */
const NEVER: KeyWindow = { start: new Date(0), end: new Date(Date.UTC(9999, 11, 31)) };

/** The window of `reset` holding `now`: a UTC day, a week from Monday, a calendar month, or all time. */
export function keyWindow(reset: LimitReset, now: Date): KeyWindow {
  const day = Math.floor(now.getTime() / DAY_MS) * DAY_MS;
  if (reset === "daily") return { start: new Date(day), end: new Date(day + DAY_MS) };
  if (reset === "weekly") {
    // getUTCDay: Sunday 0 … Saturday 6; weeks start on Monday.
    const monday = day - ((new Date(day).getUTCDay() + 6) % 7) * DAY_MS;
    return { start: new Date(monday), end: new Date(monday + 7 * DAY_MS) };
  }
  if (reset === "monthly") {
    const y = now.getUTCFullYear();
    const m = now.getUTCMonth();
    return { start: new Date(Date.UTC(y, m, 1)), end: new Date(Date.UTC(y, m + 1, 1)) };
  }
  return NEVER;
}

/** Whether the window never ends (a limit without a reset). */
export const neverResets = (window: KeyWindow) => window.end.getTime() === NEVER.end.getTime();

/** `2026-11-26T00:00:00+00:00`: times written with an explicit offset. */
export function utcOffsetTime(at: Date): string {
  return at.toISOString().replace(/\.\d{3}Z$/, "+00:00");
}
