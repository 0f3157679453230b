import type { UsageBucket, UsageFigures } from "@mkt/proto/billing/v1/billing";
import { int8, type Em } from "../context.ts";
import type { ReportInterval, ReportWindow } from "./usage-window.ts";
import { ownerCondition, type UsageOwner } from "./usage-owner.ts";

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
const BUCKET_OF_HOUR: Record<ReportInterval, string> = {
  hour: "hour",
  day: "date_bin('1 day', hour, timestamptz '2000-01-03 00:00:00+00')",
  week: "date_bin('7 days', hour, timestamptz '2000-01-03 00:00:00+00')",
  month: "date_trunc('month', hour at time zone 'UTC') at time zone 'UTC'",
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
  const whose = ownerCondition(owner);
  const rows = await em.execute(
    `with usage as (
       select ${BUCKET_OF_HOUR[interval]} as bucket,
         sum(requests) as requests, sum(input_tokens) as input_tokens, sum(output_tokens) as output_tokens,
         sum(cost_micros) as cost_micros, sum(latency_ms_sum) as latency_ms_sum,
         sum(cached_input_tokens) as cached_input_tokens,
         sum(requests) filter (where provider = 'local') as local_requests,
         sum(requests) filter (where provider = 'hoster') as hoster_requests,
         sum(requests) filter (where provider = 'cloud') as cloud_requests
       from usage_hourly
       where ${whose.sql} and hour >= ?::timestamptz and hour < ?::timestamptz
       group by 1
     )
     select to_char(buckets.bucket, 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"') as period, usage.requests,
       usage.input_tokens, usage.output_tokens, usage.cost_micros, usage.latency_ms_sum, usage.cached_input_tokens,
       usage.local_requests, usage.hoster_requests, usage.cloud_requests
     from generate_series(
       ?::timestamptz at time zone 'UTC',
       ?::timestamptz at time zone 'UTC' - ('1 ' || ?)::interval,
       ('1 ' || ?)::interval
     ) as buckets (bucket)
     left join usage on usage.bucket = buckets.bucket at time zone 'UTC'
     order by buckets.bucket`,
    [...whose.params, window.from, window.to, window.from, window.to, interval, interval],
  );
  return rows.map((row) => ({
    period: row.period as string,
    figures: figuresOf(row),
    localRequests: int8(row.local_requests),
    hosterRequests: int8(row.hoster_requests),
    cloudRequests: int8(row.cloud_requests),
  }));
}
