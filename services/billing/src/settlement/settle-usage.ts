import { isUuid } from "@mkt/runtime/ids";
import { costMicros, splitRevenue } from "@mkt/runtime/money";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { int8, type Em } from "../context.ts";
import { countPeriodUsage } from "../subscriptions/period-usage.ts";
import { ledgerAccounts, postEntry } from "../wallets/ledger.ts";
import { insertUsageRecord, replaceUsageRecord, type UsageRow } from "../usage/usage-records.ts";

export const EXPIRED_ERROR_CODE = "reservation_expired";

export type SettleOutcome = "settled" | "late_settled" | "duplicate" | "no_reservation" | "dropped";

export const clampTokens = (n: bigint) => (n < 0n ? 0n : n);

/**
 * What an event costs, from its reservation's price snapshot, never beyond the hold (so the
 * balance cannot go below zero, DESIGN.md §3). The reservation's account is the one charged. One
 * rule for the batched path and the one-by-one path.
 */
export function reservationCharge(event: UsageCompleted, reservation: Record<string, unknown>, log: Logger) {
  const accountId = reservation.account_id as string;
  if (event.accountId && event.accountId !== accountId) {
    log.warn(
      { requestId: event.requestId },
      "usage event account differs from its reservation; the reservation's is charged",
    );
  }
  const inputTokens = clampTokens(event.inputTokens);
  const outputTokens = clampTokens(event.outputTokens);
  const reserved = int8(reservation.reserved_micros);
  const full = costMicros(
    inputTokens,
    outputTokens,
    int8(reservation.input_price_per_1m_micros),
    int8(reservation.output_price_per_1m_micros),
  );
  return { accountId, inputTokens, outputTokens, reserved, cost: full > reserved ? reserved : full };
}

/** Reads a usage_records row back into a UsageRow (timestamps stay Postgres text). */
function toUsageRow(r: Record<string, unknown>): UsageRow {
  return {
    requestId: r.request_id as string,
    reservationId: (r.reservation_id as string | null) ?? null,
    accountId: r.account_id as string,
    keyId: r.key_id as string,
    modelId: r.model_id as string,
    provider: r.provider as string,
    hosterId: r.hoster_id as string,
    inputTokens: int8(r.input_tokens),
    outputTokens: int8(r.output_tokens),
    costMicros: int8(r.cost_micros),
    platformFeeMicros: int8(r.platform_fee_micros),
    hosterEarnedMicros: int8(r.hoster_earned_micros),
    latencyMs: int8(r.latency_ms),
    success: r.success as boolean,
    errorCode: r.error_code as string,
    at: r.created_at as string,
  };
}

/**
 * Settles one usage.completed event inside the caller's transaction, keyed on request_id:
 * a request that already has a usage record changes nothing, except when that record is the
 * sweeper's "reservation_expired" row, which a late event replaces (charging at most the
 * reserved amount; the hold was already released by the sweeper).
 */
export async function settleUsageEvent(em: Em, event: UsageCompleted, log: Logger, now: Date): Promise<SettleOutcome> {
  // The reservation row lock serializes settlers (and the sweeper) working on the same request.
  const [reservation] = await em.execute(`select * from reservations where request_id = ? for update`, [
    event.requestId,
  ]);
  const [existingRow] = await em.execute(`select * from usage_records where request_id = ?`, [event.requestId]);
  const existing = existingRow ? toUsageRow(existingRow) : undefined;

  const inputTokens = clampTokens(event.inputTokens);
  const outputTokens = clampTokens(event.outputTokens);
  const latencyMs = clampTokens(event.latencyMs);

  if (!reservation) {
    if (existing) return "duplicate";
    if (!isUuid(event.accountId)) {
      log.warn({ requestId: event.requestId }, "usage event with no reservation and no valid account; dropped");
      return "dropped";
    }
    log.warn(
      { requestId: event.requestId, accountId: event.accountId },
      "usage event with no reservation; recorded at no cost",
    );
    const written = await insertUsageRecord(em, {
      requestId: event.requestId,
      reservationId: null,
      accountId: event.accountId,
      keyId: event.keyId,
      modelId: event.modelId,
      provider: event.provider,
      hosterId: event.hosterId,
      inputTokens,
      outputTokens,
      costMicros: 0n,
      platformFeeMicros: 0n,
      hosterEarnedMicros: 0n,
      latencyMs,
      success: event.success,
      errorCode: event.errorCode,
      at: startedAt(event.startedAt) ?? now,
    });
    return written ? "no_reservation" : "duplicate";
  }

  const status = reservation.status as string;
  const lateAfterExpiry = status === "expired" && existing?.errorCode === EXPIRED_ERROR_CODE;
  if (existing && !lateAfterExpiry) return "duplicate";
  if (status === "settled") return "duplicate"; // settled without a record cannot happen; be safe

  const { accountId, reserved, cost: priced } = reservationCharge(event, reservation, log);
  const charge = { reservation, inputTokens, outputTokens, cost: priced };
  // A subscription request counts in its period, and an overage plan prices it there.
  await countPeriodUsage(em, [charge]);
  const cost = charge.cost;
  const provider = reservation.provider as string;
  const hosterId = reservation.hoster_id as string;
  const { platformFee, hosterEarned } = splitRevenue(cost, provider === "hoster");
  const releasedHold = status === "held" ? reserved : 0n;

  if (cost > 0n) {
    const posted = await postEntry(em, "usage", event.requestId, [
      [ledgerAccounts.customer(accountId), -cost],
      [ledgerAccounts.revenue, platformFee],
      [ledgerAccounts.hoster(hosterId), hosterEarned],
    ]);
    if (!posted) throw new Error(`usage charge for ${event.requestId} exists without a usage record`);
  }
  if (cost > 0n || releasedHold > 0n) {
    await em.execute(
      `update wallets set posted_micros = posted_micros - ?, held_micros = held_micros - ? where account_id = ?`,
      [cost, releasedHold, accountId],
    );
  }
  await em.execute(
    `update reservations set status = 'settled', slot_released_at = coalesce(slot_released_at, ?) where id = ?`,
    [now, reservation.id],
  );

  const row: UsageRow = {
    requestId: event.requestId,
    reservationId: reservation.id as string,
    accountId,
    keyId: reservation.key_id as string,
    modelId: reservation.model_id as string,
    provider,
    hosterId,
    inputTokens,
    outputTokens,
    costMicros: cost,
    platformFeeMicros: platformFee,
    hosterEarnedMicros: hosterEarned,
    latencyMs,
    success: event.success,
    errorCode: event.success ? "" : event.errorCode,
    // Bucketed by the reservation's time, so a late event lands in the expiry row's hour.
    at: reservation.created_at as string,
  };
  if (existing) {
    await replaceUsageRecord(em, existing, row);
    return "late_settled";
  }
  await insertUsageRecord(em, row);
  return "settled";
}

function startedAt(text: string): Date | undefined {
  if (!text) return undefined;
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? undefined : date;
}
