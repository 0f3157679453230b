import { AppError } from "@mkt/runtime/errors";
import { executeStatement, type Statement } from "@mkt/runtime/pipelined-transaction";
import type { Tiers, TierLimits } from "../config.ts";
import { int8, type Em } from "../context.ts";
import { RateCounter } from "./rate-counter.entity.ts";

/** The tier's limits; an unknown tier gets the "free" limits (DESIGN.md §4). */
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

export interface RateLimitStatus {
  limitPerMinute: bigint;
  remainingThisMinute: bigint;
  resetSeconds: bigint;
}

/**
 * Counts one request in the account's minute and day windows and refuses it when either is
 * over its limit. Must run inside the Authorize transaction: a refusal (this one or a later one)
 * rolls the increments back, so only admitted requests are counted. The counter rows also
 * serialize an account's concurrent Authorize calls.
 */
export async function admitRequest(em: Em, accountId: string, limits: TierLimits, now: Date): Promise<RateLimitStatus> {
  const before = await countRequests(em, new Map([[accountId, 1]]), now);
  const { minute, day } = before.get(accountId)!;
  return checkRequestLimits(minute + 1n, day + 1n, limits, now);
}

/**
 * Adds `n` requests to each account's minute and day counters in one statement (accounts in
 * ascending order, the order every Authorize locks them in) and returns each account's counts
 * before this call. Refused requests must be taken off again (uncountStatement) in the same
 * transaction.
 */
export async function countRequests(
  em: Em,
  counts: ReadonlyMap<string, number>,
  now: Date,
): Promise<Map<string, { minute: bigint; day: bigint }>> {
  return countsBefore(counts, await executeStatement(em, counterUpsert(counts, now)));
}

/** The upsert of countRequests, for a statement that does more in the same round trip. */
export function counterUpsert(counts: ReadonlyMap<string, number>, now: Date): Statement {
  const w = currentWindows(now);
  const accounts = [...counts.keys()].sort();
  return {
    sql: `insert into rate_counters (account_id, "window", window_start, count)
     values ${accounts.map(() => `(?, 'minute', ?, ?), (?, 'day', ?, ?)`).join(", ")}
     on conflict (account_id, "window", window_start) do update set count = rate_counters.count + excluded.count
     returning account_id, "window", count`,
    params: accounts.flatMap((id) => [id, w.minuteStart, counts.get(id)!, id, w.dayStart, counts.get(id)!]),
  };
}

/** Each account's counts before the upsert, from the rows it returned. */
export function countsBefore(
  counts: ReadonlyMap<string, number>,
  rows: ReadonlyArray<Record<string, unknown>>,
): Map<string, { minute: bigint; day: bigint }> {
  const before = new Map([...counts.keys()].map((id) => [id, { minute: 0n, day: 0n }]));
  for (const row of rows) {
    const id = row.account_id as string;
    const entry = before.get(id)!;
    const prior = int8(row.count) - BigInt(counts.get(id)!);
    if (row.window === "minute") entry.minute = prior;
    else entry.day = prior;
  }
  return before;
}

/**
 * The statement that takes back requests counted (counterUpsert) and refused afterwards. Run in
 * the counting transaction, or after it for a refusal found only at its end.
 */
export function uncountStatement(counts: ReadonlyMap<string, number>, now: Date): Statement {
  const w = currentWindows(now);
  const accounts = [...counts.keys()].sort();
  return {
    sql: `update rate_counters c set count = c.count - v.n
     from (values ${accounts.map(() => "(?::uuid, ?::bigint)").join(", ")}) as v(account_id, n)
     where c.account_id = v.account_id
       and ((c."window" = 'minute' and c.window_start = ?) or (c."window" = 'day' and c.window_start = ?))`,
    params: [...accounts.flatMap((id) => [id, counts.get(id)!]), w.minuteStart, w.dayStart],
  };
}

/** Refuses a request whose counts (itself included) pass the tier's limits; else its status. */
export function checkRequestLimits(minute: bigint, day: bigint, limits: TierLimits, now: Date): RateLimitStatus {
  const w = currentWindows(now);
  if (minute > limits.limitPerMinute) {
    throw refusal("minute", limits.limitPerMinute, w.minuteResetSeconds);
  }
  if (day > limits.limitPerDay) {
    throw refusal("day", limits.limitPerDay, w.dayResetSeconds);
  }
  return {
    limitPerMinute: limits.limitPerMinute,
    remainingThisMinute: limits.limitPerMinute - minute,
    resetSeconds: BigInt(w.minuteResetSeconds),
  };
}

function refusal(window: "minute" | "day", limit: bigint, resetSeconds: number): AppError {
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

/** Drops counter rows of windows long past (the tier's and the plans'); they only grow otherwise. */
export async function pruneCounters(em: Em, now: Date): Promise<void> {
  await em.execute(`delete from rate_counters where window_start < ?`, [new Date(now.getTime() - 2 * 86_400_000)]);
  await em.execute(`delete from subscription_rate_counters where window_start < ?`, [
    new Date(now.getTime() - 3_600_000),
  ]);
}
