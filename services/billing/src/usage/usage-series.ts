import type { UsageBucket, UsageFigures } from "@mkt/proto/billing/v1/billing";
import { sql, type AliasableExpression } from "kysely";
import { billingDb } from "../billing-db.ts";
import { int8, type Em } from "../context.ts";
import type { ReportInterval, ReportWindow } from "./usage-window.ts";
import { ownerWhere, type UsageOwner } from "./usage-owner.ts";

/** Reads the summed rollup columns of one result row (absent sums are zero). */
export function figuresOf(row: Record<string, unknown>): UsageFigures {
  return {
    requests: int8(row.requests),
    inputTokens: int8(row.input_tokens),
    outputTokens: int8(row.output_tokens),
    costMicros: int8(row.cost_micros),
    latencyMsSum: int8(row.latency_ms_sum),
    cachedInputTokens: int8(row.cached_input_tokens),
  };
}

export function addFigures(a: UsageFigures, b: UsageFigures): UsageFigures {
  return {
    requests: a.requests + b.requests,
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    costMicros: a.costMicros + b.costMicros,
    latencyMsSum: a.latencyMsSum + b.latencyMsSum,
    cachedInputTokens: a.cachedInputTokens + b.cachedInputTokens,
  };
}

export const NO_USAGE: UsageFigures = {
  requests: 0n,
  inputTokens: 0n,
  outputTokens: 0n,
  costMicros: 0n,
  latencyMsSum: 0n,
  cachedInputTokens: 0n,
};

/**
 * The bucket of a rollup hour, as timestamptz. It runs once per rollup row, so hours, days and
 * weeks use date_bin, plain arithmetic from a UTC origin (2000-01-03 was a Monday: weeks start on
 * Monday); only months need the calendar, on UTC wall time.
 */
const BUCKET_OF_HOUR: Record<ReportInterval, (hour: AliasableExpression<string>) => AliasableExpression<string>> = {
  hour: (hour) => hour,
  day: (hour) => sql`date_bin('1 day', ${hour}, timestamptz '2000-01-03 00:00:00+00')`,
  week: (hour) => sql`date_bin('7 days', ${hour}, timestamptz '2000-01-03 00:00:00+00')`,
  month: (hour) => sql`date_trunc('month', ${hour} at time zone 'UTC') at time zone 'UTC'`,
};

/**
 * One entry per `interval` bucket of the window, zero-filled, oldest first, summed from the
 * hourly rollups (never the raw records). The series itself is generated on UTC wall time
 * (`timestamp` values), so a month step is a calendar month and a day 24 hours whatever the
 * session's time zone.
 */
export async function usageSeries(
  em: Em,
  owner: UsageOwner,
  window: ReportWindow,
  interval: ReportInterval,
): Promise<UsageBucket[]> {
  const db = await billingDb(em);
  const step = `1 ${interval}`;
  const rows = await db
    .with("usage", (db) =>
      db
        .selectFrom("usage_hourly")
        .select((eb) => [
          BUCKET_OF_HOUR[interval](eb.ref("hour")).as("bucket"),
          eb.fn.sum<string>("requests").as("requests"),
          eb.fn.sum<string>("input_tokens").as("input_tokens"),
          eb.fn.sum<string>("output_tokens").as("output_tokens"),
          eb.fn.sum<string>("cost_micros").as("cost_micros"),
          eb.fn.sum<string>("latency_ms_sum").as("latency_ms_sum"),
          eb.fn.sum<string>("cached_input_tokens").as("cached_input_tokens"),
          eb.fn.sum<string>("requests").filterWhere("provider", "=", "local").as("local_requests"),
          eb.fn.sum<string>("requests").filterWhere("provider", "=", "hoster").as("hoster_requests"),
          eb.fn.sum<string>("requests").filterWhere("provider", "=", "cloud").as("cloud_requests"),
        ])
        .where(ownerWhere(owner))
        .where("hour", ">=", window.from)
        .where("hour", "<", window.to)
        .groupBy("bucket"),
    )
    .selectFrom(
      // The buckets on UTC wall time (timestamp), the window's bounds bound as timestamptz text.
      sql<{ bucket: string }>`generate_series(
        ${window.from}::timestamptz at time zone 'UTC',
        ${window.to}::timestamptz at time zone 'UTC' - ${step}::interval,
        ${step}::interval
      )`.as<"buckets">(sql`buckets (bucket)`),
    )
    .leftJoin("usage", (join) =>
      join.on((eb) => eb("usage.bucket", "=", sql<string>`${eb.ref("buckets.bucket")} at time zone 'UTC'`)),
    )
    .select((eb) => [
      sql<string>`to_char(${eb.ref("buckets.bucket")}, 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"')`.as("period"),
      "usage.requests",
      "usage.input_tokens",
      "usage.output_tokens",
      "usage.cost_micros",
      "usage.latency_ms_sum",
      "usage.cached_input_tokens",
      "usage.local_requests",
      "usage.hoster_requests",
      "usage.cloud_requests",
    ])
    .orderBy("buckets.bucket")
    .execute();
  return rows.map((row) => ({
    period: row.period,
    figures: figuresOf(row),
    localRequests: int8(row.local_requests),
    hosterRequests: int8(row.hoster_requests),
    cloudRequests: int8(row.cloud_requests),
  }));
}
