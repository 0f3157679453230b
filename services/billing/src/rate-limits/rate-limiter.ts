import { AppError } from "@mkt/runtime/errors";
import type { Tiers, TierLimits } from "../config.ts";
import type { Em } from "../context.ts";
import { RateCounter } from "./rate-counter.entity.ts";

/** The tier's limits; an unknown tier gets the "free" limits. */
export function tierLimits(tiers: Tiers, tier: string): TierLimits {
  return tiers[tier] ?? tiers.free!;
}

/** The current UTC calendar minute and day, and the seconds until each ends (at least 1). */
export function currentWindows(now: Date) {
  const ms = now.getTime();
  const minuteStart = new Date(Math.floor(ms / 60_000) * 60_000);
  const dayStart = new Date(Math.floor(ms / 86_400_000) * 86_400_000);
  return {
    minuteStart,
    dayStart,
    minuteResetSeconds: Math.max(1, Math.ceil((minuteStart.getTime() + 60_000 - ms) / 1000)),
    dayResetSeconds: Math.max(1, Math.ceil((dayStart.getTime() + 86_400_000 - ms) / 1000)),
  };
}

/** The 429 of a full minute or day window, with its retry-after and x-ratelimit-* headers. */
export function rateLimitRefusal(window: "minute" | "day", limit: bigint, resetSeconds: number): AppError {
  return new AppError(
    "rate_limit_exceeded",
    `Rate limit reached: ${limit} requests per ${window}. Try again in ${resetSeconds}s.`,
    {
      headers: {
        "retry-after": String(resetSeconds),
        "x-ratelimit-limit-requests": String(limit),
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": `${resetSeconds}s`,
      },
    },
  );
}

/** Requests counted so far in the current minute and day (0 for a window with no row yet). */
export async function currentCounts(em: Em, accountId: string, now: Date): Promise<{ minute: bigint; day: bigint }> {
  const w = currentWindows(now);
  const rows = await em.find(RateCounter, {
    accountId,
    $or: [
      { window: "minute", windowStart: w.minuteStart },
      { window: "day", windowStart: w.dayStart },
    ],
  });
  const count = (window: string) => rows.find((row) => row.window === window)?.count ?? 0n;
  return { minute: count("minute"), day: count("day") };
}
