import type { Micros } from "@mkt/runtime/money";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
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

const COLUMNS = `request_id, account_id, key_id, model_id, provider, hoster_id, subscription_id,
  input_tokens, output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms, success, error_code,
  created_at, time_to_first_token_ms, finish_reason`;

function values(row: UsageRow): unknown[] {
  return [
    row.requestId,
    row.accountId,
    row.keyId,
    row.modelId,
    row.provider,
    row.hosterId,
    row.subscriptionId,
    row.inputTokens,
    row.outputTokens,
    row.costMicros,
    row.platformFeeMicros,
    row.hosterEarnedMicros,
    row.latencyMs,
    row.success,
    row.errorCode,
    row.at,
    row.answer?.timeToFirstTokenMs ?? null,
    row.answer?.finishReason ?? "",
  ];
}

/** Inserts the record unless the request already has one; returns whether it was written. */
export async function insertUsageRecord(em: Em, row: UsageRow): Promise<boolean> {
  return (await insertUsageRecords(em, [row])).has(row.requestId);
}

/**
 * Inserts the records whose requests have none yet, and adds those to their hourly buckets: two
 * statements for any number of records. Returns the request ids written.
 */
export async function insertUsageRecords(em: Em, rows: readonly UsageRow[]): Promise<Set<string>> {
  if (rows.length === 0) return new Set();
  const row = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::timestamptz, ?, ?)";
  const inserted = await em.execute(
    `insert into usage_records (${COLUMNS})
     values ${rows.map(() => row).join(", ")}
     on conflict (request_id) do nothing returning request_id`,
    rows.flatMap(values),
  );
  const written = new Set(inserted.map((r) => r.request_id as string));
  await addToHourlyRollups(
    em,
    rows.filter((r) => written.has(r.requestId)),
  );
  return written;
}

/** The columns of an hourly bucket. */
const HOURLY_COLUMNS = `(account_id, hour, model_id, provider, subscription_id, requests, input_tokens,
  output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms_sum, failed)`;

/** How a bucket takes in a new record's figures: every column adds up. */
const HOURLY_ACCUMULATE = `on conflict (account_id, hour, model_id, provider, subscription_id) do update set
  requests = usage_hourly.requests + excluded.requests,
  input_tokens = usage_hourly.input_tokens + excluded.input_tokens,
  output_tokens = usage_hourly.output_tokens + excluded.output_tokens,
  cost_micros = usage_hourly.cost_micros + excluded.cost_micros,
  platform_fee_micros = usage_hourly.platform_fee_micros + excluded.platform_fee_micros,
  hoster_earned_micros = usage_hourly.hoster_earned_micros + excluded.hoster_earned_micros,
  latency_ms_sum = usage_hourly.latency_ms_sum + excluded.latency_ms_sum,
  failed = usage_hourly.failed + excluded.failed`;

/** One hourly bucket's key and the figures added to it. */
interface HourlyAddition {
  row: UsageRow;
  hour: Date;
  figures: bigint[];
}

const HOUR_MS = 3_600_000;

/**
 * Adds the records' figures to their hourly buckets in one statement, summed per bucket first (an
 * INSERT … ON CONFLICT may not touch the same row twice).
 */
async function addToHourlyRollups(em: Em, rows: readonly UsageRow[]): Promise<void> {
  const buckets = new Map<string, HourlyAddition>();
  for (const row of rows) {
    const at = new Date(row.at);
    const hour = new Date(Math.floor(at.getTime() / HOUR_MS) * HOUR_MS); // date_trunc('hour', …, 'UTC')
    const key = [row.accountId, hour.toISOString(), row.modelId, row.provider, row.subscriptionId].join("\u0000");
    const figures = [
      1n,
      row.inputTokens,
      row.outputTokens,
      row.costMicros,
      row.platformFeeMicros,
      row.hosterEarnedMicros,
      row.latencyMs,
      row.success ? 0n : 1n,
    ];
    const bucket = buckets.get(key);
    if (bucket) bucket.figures = bucket.figures.map((n, i) => n + figures[i]!);
    else buckets.set(key, { row, hour, figures });
  }
  if (buckets.size === 0) return;
  const all = [...buckets.values()];
  await em.execute(
    `insert into usage_hourly ${HOURLY_COLUMNS}
     values ${all.map(() => "(?, ?::timestamptz, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").join(", ")}
     ${HOURLY_ACCUMULATE}`,
    all.flatMap(({ row, hour, figures }) => [
      row.accountId,
      hour,
      row.modelId,
      row.provider,
      row.subscriptionId,
      ...figures,
    ]),
  );
}
