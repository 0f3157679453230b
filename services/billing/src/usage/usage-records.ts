import type { Micros } from "@mkt/runtime/money";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { runTogether, sqlArray, type ArrayElement, type Cte } from "../batch-statement.ts";
import type { Em } from "../context.ts";

/** One usage record as settlement writes it; `at` is the request's time (rollup bucket). */
export interface UsageRow {
  requestId: string;
  accountId: string;
  keyId: string;
  modelId: string;
  provider: string;
  hosterId: string;
  /** The subscription a scoped key made the request under; '' for the account's own keys. */
  subscriptionId: string;
  inputTokens: bigint;
  outputTokens: bigint;
  costMicros: Micros;
  platformFeeMicros: Micros;
  hosterEarnedMicros: Micros;
  latencyMs: bigint;
  success: boolean;
  errorCode: string;
  /** A Date, or a timestamptz text read back from Postgres. */
  at: Date | string;
  /** How the answer went, as its usage event says (answerOf); absent when no event did. */
  answer?: AnswerDetails;
}

/** What a usage record shows of the answer itself (GET /v1/generations/{id}). */
export interface AnswerDetails {
  timeToFirstTokenMs: bigint | null;
  finishReason: string;
}

/** The answer's details as registry reported them in the request's usage.completed. */
export function answerOf(event: UsageCompleted): AnswerDetails {
  const ttft = event.timeToFirstTokenMs;
  return { timeToFirstTokenMs: ttft === undefined || ttft < 0n ? null : ttft, finishReason: event.finishReason };
}

/** Inserts the record unless the request already has one; returns whether it was written. */
export async function insertUsageRecord(em: Em, row: UsageRow): Promise<boolean> {
  return (await insertUsageRecords(em, [row])).has(row.requestId);
}

/**
 * Inserts the records whose requests have none yet, and adds those to their hourly buckets, in
 * one statement (usageRecordCtes). Returns the request ids written.
 */
export async function insertUsageRecords(em: Em, rows: readonly UsageRow[]): Promise<Set<string>> {
  if (rows.length === 0) return new Set();
  const row = await runTogether(
    em,
    usageRecordCtes(rows),
    `select coalesce(array_agg(request_id), '{}') as written from ${NEW_RECORDS}`,
  );
  return new Set(row.written as string[]);
}

/** The CTE of usageRecordCtes returning the records written (`request_id`). */
export const NEW_RECORDS = "new_records";

/**
 * The usage records as two CTEs of one statement (batch-statement.ts): the records whose requests
 * have none yet are inserted and returned as NEW_RECORDS, and only those are added to their
 * hourly buckets (usage_hourly, every column adding up), summed per bucket and upserted in key
 * order, so two settlers take the buckets' locks in the same order.
 */
export function usageRecordCtes(rows: readonly UsageRow[]): Cte[] {
  const column = (read: (row: UsageRow) => ArrayElement) => sqlArray(rows.map(read));
  return [
    {
      name: NEW_RECORDS,
      sql: `insert into usage_records (request_id, account_id, key_id, model_id, provider, hoster_id,
          subscription_id, input_tokens, output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros,
          latency_ms, success, error_code, created_at, time_to_first_token_ms, finish_reason)
        select * from unnest(?::text[], ?::uuid[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[],
          ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::boolean[], ?::text[],
          ?::timestamptz[], ?::bigint[], ?::text[])
        on conflict (request_id) do nothing
        returning request_id, account_id, created_at, model_id, provider, subscription_id, input_tokens,
          output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms, success`,
      params: [
        column((r) => r.requestId),
        column((r) => r.accountId),
        column((r) => r.keyId),
        column((r) => r.modelId),
        column((r) => r.provider),
        column((r) => r.hosterId),
        column((r) => r.subscriptionId),
        column((r) => r.inputTokens),
        column((r) => r.outputTokens),
        column((r) => r.costMicros),
        column((r) => r.platformFeeMicros),
        column((r) => r.hosterEarnedMicros),
        column((r) => r.latencyMs),
        column((r) => r.success),
        column((r) => r.errorCode),
        column((r) => (typeof r.at === "string" ? r.at : r.at.toISOString())),
        column((r) => r.answer?.timeToFirstTokenMs ?? null),
        column((r) => r.answer?.finishReason ?? ""),
      ],
    },
    {
      name: "hourly_added",
      sql: `insert into usage_hourly (account_id, hour, model_id, provider, subscription_id, requests, input_tokens,
          output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms_sum, failed)
        select account_id, date_trunc('hour', created_at, 'UTC'), model_id, provider, subscription_id, count(*),
          sum(input_tokens), sum(output_tokens), sum(cost_micros), sum(platform_fee_micros),
          sum(hoster_earned_micros), sum(latency_ms), count(*) filter (where not success)
        from ${NEW_RECORDS} group by 1, 2, 3, 4, 5 order by 1, 2, 3, 4, 5
        on conflict (account_id, hour, model_id, provider, subscription_id) do update set
          requests = usage_hourly.requests + excluded.requests,
          input_tokens = usage_hourly.input_tokens + excluded.input_tokens,
          output_tokens = usage_hourly.output_tokens + excluded.output_tokens,
          cost_micros = usage_hourly.cost_micros + excluded.cost_micros,
          platform_fee_micros = usage_hourly.platform_fee_micros + excluded.platform_fee_micros,
          hoster_earned_micros = usage_hourly.hoster_earned_micros + excluded.hoster_earned_micros,
          latency_ms_sum = usage_hourly.latency_ms_sum + excluded.latency_ms_sum,
          failed = usage_hourly.failed + excluded.failed`,
      params: [],
    },
  ];
}
