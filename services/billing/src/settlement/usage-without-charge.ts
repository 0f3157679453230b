import { min } from "@mkt/runtime/bigint-math";
import { isUuid, uuidV7Time } from "@mkt/runtime/ids";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { answerOf } from "../usage/usage-records.ts";
import type { SettlementWrites } from "./settlement-writes.ts";
import type { Refusal, SettleOutcome } from "./settle-outcome.ts";

export type { Refusal, SettleOutcome };

const REFUSALS: Record<Refusal, string> = {
  unknown_lease: "usage event names an unknown lease; recorded at no cost",
  foreign_lease: "usage event names another account's lease; recorded at no cost",
  over_lease_credit: "usage event's worst case exceeds all the credit its lease was granted; recorded at no cost",
};

export const clampTokens = (n: bigint) => (n < 0n ? 0n : n);

/** The edge's receipt time of the request, when the event carries a readable one. */
export function startedAt(text: string): Date | undefined {
  if (!text) return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/**
 * The request's time, as its usage record keeps it (`created_at`, the key of its partition and
 * half of its unique key, docs/adr/0045-usage-records-append.md): the event's `started_at`, else
 * the time in its UUIDv7 request id. Both come from the event's bytes, never from the clock of
 * whoever settles it, so every delivery of one event (a redelivered batch, RecordUsage, a replay
 * past JetStream's dedup window) names the same record. Undefined when the event carries neither:
 * such an event is dead-lettered (unrecordableReason).
 */
export function requestTime(event: UsageCompleted): Date | undefined {
  const at = startedAt(event.startedAt) ?? uuidV7Time(event.requestId);
  // PostgreSQL reads ISO years of four digits: a forged v7 id's time can be far past 9999.
  return at && at.getTime() >= 0 && at.getUTCFullYear() <= 9999 ? at : undefined;
}

/** requestTime, for an event unrecordableReason let through. */
export function recordTime(event: UsageCompleted): Date {
  const at = requestTime(event);
  if (!at) throw new Error(`usage event ${event.requestId} carries no time: ${unrecordableReason(event)}`);
  return at;
}

/**
 * Why an event can never be recorded, whatever is retried: no request id to key it on, or one that
 * is not a UUID (the record's key is a uuid column: an id of another shape is kept as it came, not
 * cast or dropped), no time to record it at, or no valid account to record it under (an event
 * that names no hold is recorded at no cost under its account, so without one there is nowhere to
 * put it). Such an event is dead-lettered before its batch settles
 * (docs/settlement.md#dead-letters); undefined for an event that can be recorded.
 */
export function unrecordableReason(event: UsageCompleted): string | undefined {
  if (!event.requestId) return "request_id is empty";
  if (!isUuid(event.requestId)) return `request_id ${JSON.stringify(event.requestId.slice(0, 64))} is not a UUID`;
  if (!requestTime(event))
    return "no time to record it at: started_at and the request id's (UUIDv7) are missing or unreadable";
  if (!isUuid(event.accountId)) return `account_id ${JSON.stringify(event.accountId.slice(0, 64))} is not a UUID`;
  return undefined;
}

/**
 * Records an event that names no hold billing knows (no lease id, which no edge sends since every
 * request is admitted on a lease), or that its lease refutes (`refused`), at no cost under the
 * account it names: nothing was held for it, so nothing may be charged, but its usage still
 * shows. One whose request has a record already (`recorded`) changes nothing. An event with no
 * valid account never gets here (unrecordableReason dead-letters it first); if one did, its batch
 * fails rather than drop it, and the event is dead-lettered when it fails alone.
 */
export function recordWithoutCharge(
  writes: SettlementWrites,
  recorded: ReadonlySet<string>,
  event: UsageCompleted,
  log: Logger,
  refused?: Refusal,
): SettleOutcome {
  const unrecordable = unrecordableReason(event);
  if (unrecordable) throw new Error(`usage event ${event.requestId} cannot be recorded: ${unrecordable}`);
  if (recorded.has(event.requestId)) return "duplicate";
  const context = { requestId: event.requestId, accountId: event.accountId, leaseId: event.leaseId || undefined };
  log.warn(context, refused ? REFUSALS[refused] : "usage event with no hold; recorded at no cost");
  writes.recordWithoutCharge({
    requestId: event.requestId,
    accountId: event.accountId,
    keyId: event.keyId,
    modelId: event.modelId,
    provider: event.provider,
    hosterId: event.hosterId,
    subscriptionId: "", // unknown without a hold
    inputTokens: clampTokens(event.inputTokens),
    outputTokens: clampTokens(event.outputTokens),
    cachedInputTokens: min(clampTokens(event.cachedInputTokens), clampTokens(event.inputTokens)),
    reasoningTokens: min(clampTokens(event.reasoningTokens), clampTokens(event.outputTokens)),
    costMicros: 0n,
    platformFeeMicros: 0n,
    hosterEarnedMicros: 0n,
    latencyMs: clampTokens(event.latencyMs),
    success: event.success,
    errorCode: event.errorCode,
    at: recordTime(event),
    answer: answerOf(event),
  });
  return refused ?? "no_hold";
}
