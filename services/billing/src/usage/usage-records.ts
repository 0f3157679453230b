import type { Micros } from "@mkt/runtime/money";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { runTogether, sqlArray, type ArrayElement, type Cte } from "../batch-statement.ts";
import type { Em } from "../context.ts";
import { rollupQueueCte, type KeySpendDelta } from "./rollup-queue.ts";

/**
 * One usage record as settlement writes it; `at` is the request's time (rollup bucket, partition
 * and half of the record's key: taken from its event, requestTime in usage-without-charge.ts).
 */
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
  /** Of inputTokens, those served from the upstream's prompt cache (0 when none were). */
  cachedInputTokens?: bigint;
  /** Of outputTokens, those spent reasoning. */
  reasoningTokens?: bigint;
  costMicros: Micros;
  platformFeeMicros: Micros;
  hosterEarnedMicros: Micros;
  /** Of costMicros, what the platform absorbed because the customer could no longer pay it. */
  writeOffMicros?: Micros;
  /** The settled batch's journal entry; null or absent for a request charged nothing. */
  entryId?: string | null;
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
 * Inserts the records whose requests have none yet, and queues what those add to the rollups, in
 * one statement (usageRecordCtes). Returns the request ids written.
 */
export async function insertUsageRecords(em: Em, rows: readonly UsageRow[]): Promise<Set<string>> {
  if (rows.length === 0) return new Set();
  const row = await runTogether(
    em,
    usageRecordCtes(rows),
    `select coalesce(array_agg(request_id::text), '{}') as written from ${NEW_RECORDS}`,
  );
  return new Set(row.written as string[]);
}

/** The CTE of usageRecordCtes returning the records written (`request_id`). */
export const NEW_RECORDS = "new_records";

/**
 * The usage records as two CTEs of one statement (batch-statement.ts): the records whose requests
 * have none yet (the key is (request_id, created_at), both fixed by the event, so a request
 * recorded already conflicts however its event came: docs/adr/0045-usage-records-append.md) are inserted and returned as NEW_RECORDS (which the batch's journal entry sums,
 * batch-journal-entry.ts), and only those are summed into the batch's one row of rollup deltas
 * (rollup-queue.ts), with `keySpend`, the spend of keys without a limit; the fold worker adds them
 * to the rollups later (rollup-fold.ts).
 */
export function usageRecordCtes(rows: readonly UsageRow[], keySpend: readonly KeySpendDelta[] = []): Cte[] {
  const column = (read: (row: UsageRow) => ArrayElement) => sqlArray(rows.map(read));
  return [
    {
      name: NEW_RECORDS,
      sql: `insert into usage_records (request_id, account_id, key_id, model_id, provider, hoster_id,
          subscription_id, input_tokens, output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros,
          latency_ms, success, error_code, created_at, time_to_first_token_ms, finish_reason, cached_input_tokens,
          reasoning_tokens, write_off_micros, entry_id)
        select * from unnest(?::uuid[], ?::uuid[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[],
          ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[], ?::boolean[], ?::text[],
          ?::timestamptz[], ?::bigint[], ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::uuid[])
        on conflict (request_id, created_at) do nothing
        returning request_id, account_id, key_id, created_at, model_id, provider, hoster_id, subscription_id, input_tokens,
          output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, write_off_micros, entry_id,
          latency_ms, success, cached_input_tokens`,
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
        column((r) => r.cachedInputTokens ?? 0n),
        column((r) => r.reasoningTokens ?? 0n),
        column((r) => r.writeOffMicros ?? 0n),
        column((r) => r.entryId ?? null),
      ],
    },
    rollupQueueCte(NEW_RECORDS, keySpend),
  ];
}
