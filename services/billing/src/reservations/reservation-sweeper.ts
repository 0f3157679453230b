import type { BillingContext } from "../context.ts";
import { int8 } from "../context.ts";
import { pruneCounters } from "../rate-limits/rate-limiter.ts";
import { insertUsageRecord } from "../usage/usage-records.ts";
import { EXPIRED_ERROR_CODE } from "../settlement/settle-usage.ts";
import { repeatEvery } from "@mkt/runtime/periodic";

export interface SweepResult {
  /** False when the settlement consumer still had events pending, so nothing was swept. */
  ran: boolean;
  expired: number;
}

const SWEEP_BATCH = 500;

/**
 * Expires held reservations past their deadline: releases the hold, charges nothing and writes a
 * success=false usage record. It runs only while the settlement consumer has nothing pending, so
 * an event still queued for a reservation is settled (and charged) rather than swept.
 */
export async function sweepExpiredReservations(
  ctx: BillingContext,
  consumerIdle: () => Promise<boolean>,
): Promise<SweepResult> {
  if (!(await consumerIdle())) return { ran: false, expired: 0 };
  const now = ctx.clock();
  let expired = 0;
  for (;;) {
    const swept = await ctx.orm.em.fork().transactional(async (em) => {
      // SKIP LOCKED: a reservation being settled right now is left to its settlement.
      const rows = await em.execute(
        `select id, request_id, account_id, key_id, model_id, provider, hoster_id, reserved_micros, created_at
         from reservations where status = 'held' and expires_at <= ?
         order by expires_at limit ? for update skip locked`,
        [now, SWEEP_BATCH],
      );
      for (const r of rows) {
        await em.execute(
          `update reservations set status = 'expired', slot_released_at = coalesce(slot_released_at, ?) where id = ?`,
          [now, r.id],
        );
        const reserved = int8(r.reserved_micros);
        if (reserved > 0n) {
          await em.execute(`update wallets set held_micros = held_micros - ? where account_id = ?`, [
            reserved,
            r.account_id,
          ]);
        }
        await insertUsageRecord(em, {
          requestId: r.request_id as string,
          reservationId: r.id as string,
          accountId: r.account_id as string,
          keyId: r.key_id as string,
          modelId: r.model_id as string,
          provider: r.provider as string,
          hosterId: r.hoster_id as string,
          inputTokens: 0n,
          outputTokens: 0n,
          costMicros: 0n,
          platformFeeMicros: 0n,
          hosterEarnedMicros: 0n,
          // The request's real duration is unknown; it never reported back.
          latencyMs: 0n,
          success: false,
          errorCode: EXPIRED_ERROR_CODE,
          at: r.created_at as string,
        });
      }
      return rows.length;
    });
    expired += swept;
    if (swept < SWEEP_BATCH) break;
  }
  await pruneCounters(ctx.orm.em.fork(), now);
  if (expired > 0) ctx.log.info({ expired }, "expired reservations released");
  return { ran: true, expired };
}

/** Runs the sweep every `intervalMs`; returns a stop function. */
export function startSweeper(
  ctx: BillingContext,
  consumerIdle: () => Promise<boolean>,
  intervalMs: number,
): () => Promise<void> {
  return repeatEvery(intervalMs, () => sweepExpiredReservations(ctx, consumerIdle), ctx.log, "reservation sweep");
}
