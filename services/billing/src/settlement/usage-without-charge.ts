import { isUuid } from "@mkt/runtime/ids";
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
 * Records an event that names no hold billing knows (no lease id, which no edge sends since every
 * request is admitted on a lease), or that its lease refutes (`refused`), at no cost under the
 * account it names: nothing was held for it, so nothing may be charged, but its usage still
 * shows. An event with no valid account cannot even be recorded and is dropped; one whose request
 * has a record already (`recorded`) changes nothing.
 */
export function recordWithoutCharge(
  writes: SettlementWrites,
  recorded: ReadonlySet<string>,
  event: UsageCompleted,
  log: Logger,
  now: Date,
  refused?: Refusal,
): SettleOutcome {
  if (!isUuid(event.accountId)) {
    log.warn({ requestId: event.requestId, refused }, "usage event with no hold and no valid account; dropped");
    return "dropped";
  }
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
    costMicros: 0n,
    platformFeeMicros: 0n,
    hosterEarnedMicros: 0n,
    latencyMs: clampTokens(event.latencyMs),
    success: event.success,
    errorCode: event.errorCode,
    at: startedAt(event.startedAt) ?? now,
    answer: answerOf(event),
  });
  return refused ?? "no_hold";
}
