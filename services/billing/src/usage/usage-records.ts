import type { Micros } from "@mkt/runtime/money";
import type { Em } from "../context.ts";

/** One usage record as settlement writes it; `at` is the request's time (rollup bucket). */
export interface UsageRow {
  requestId: string;
  reservationId: string | null;
  accountId: string;
  keyId: string;
  modelId: string;
  provider: string;
  hosterId: string;
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
}

const COLUMNS = `request_id, reservation_id, account_id, key_id, model_id, provider, hoster_id, input_tokens,
  output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms, success, error_code, created_at`;

function values(row: UsageRow): unknown[] {
  return [
    row.requestId,
    row.reservationId,
    row.accountId,
    row.keyId,
    row.modelId,
    row.provider,
    row.hosterId,
    row.inputTokens,
    row.outputTokens,
    row.costMicros,
    row.platformFeeMicros,
    row.hosterEarnedMicros,
    row.latencyMs,
    row.success,
    row.errorCode,
    row.at,
  ];
}

/** Inserts the record unless the request already has one; returns whether it was written. */
export async function insertUsageRecord(em: Em, row: UsageRow): Promise<boolean> {
  const inserted = await em.execute(
    `insert into usage_records (${COLUMNS})
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::timestamptz)
     on conflict (request_id) do nothing returning request_id`,
    values(row),
  );
  if (inserted.length === 0) return false;
  await addToHourlyRollup(em, row, 1n);
  return true;
}

/**
 * Replaces a request's record (a late event overriding the sweeper's "reservation_expired"
 * row) and moves the rollup by the difference, so the hour still counts the request once.
 */
export async function replaceUsageRecord(em: Em, previous: UsageRow, row: UsageRow): Promise<void> {
  await em.execute(
    `update usage_records set (${COLUMNS}) = (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::timestamptz)
     where request_id = ?`,
    [...values(row), previous.requestId],
  );
  await addToHourlyRollup(em, previous, -1n);
  await addToHourlyRollup(em, row, 1n);
}

/** The columns of an hourly bucket, in the order both rollup writers insert them. */
export const HOURLY_COLUMNS = `(account_id, hour, model_id, provider, requests, input_tokens, output_tokens,
  cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms_sum, failed)`;

/** How a bucket takes in new figures: every column adds up (a negative row takes a record out). */
export const HOURLY_ACCUMULATE = `on conflict (account_id, hour, model_id, provider) do update set
  requests = usage_hourly.requests + excluded.requests,
  input_tokens = usage_hourly.input_tokens + excluded.input_tokens,
  output_tokens = usage_hourly.output_tokens + excluded.output_tokens,
  cost_micros = usage_hourly.cost_micros + excluded.cost_micros,
  platform_fee_micros = usage_hourly.platform_fee_micros + excluded.platform_fee_micros,
  hoster_earned_micros = usage_hourly.hoster_earned_micros + excluded.hoster_earned_micros,
  latency_ms_sum = usage_hourly.latency_ms_sum + excluded.latency_ms_sum,
  failed = usage_hourly.failed + excluded.failed`;

/** Adds (sign 1) or removes (sign -1) one record's figures in its hourly bucket. */
async function addToHourlyRollup(em: Em, row: UsageRow, sign: 1n | -1n): Promise<void> {
  await em.execute(
    `insert into usage_hourly ${HOURLY_COLUMNS}
     values (?, date_trunc('hour', ?::timestamptz, 'UTC'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ${HOURLY_ACCUMULATE}`,
    [
      row.accountId,
      row.at,
      row.modelId,
      row.provider,
      sign,
      sign * row.inputTokens,
      sign * row.outputTokens,
      sign * row.costMicros,
      sign * row.platformFeeMicros,
      sign * row.hosterEarnedMicros,
      sign * row.latencyMs,
      row.success ? 0n : sign,
    ],
  );
}
