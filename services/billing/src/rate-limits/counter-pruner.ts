import { repeatEvery } from "@mkt/runtime/periodic";
import type { BillingContext, Em } from "../context.ts";

/**
 * Drops counter rows of windows long past (the tier's minute and day windows, the plans' minutes):
 * leases count room in them as it is granted, so a row is written per account and window in use,
 * and nothing else deletes them. Two days and an hour back leave every current window alone.
 */
export async function pruneCounters(em: Em, now: Date): Promise<void> {
  await em.execute(`delete from rate_counters where window_start < ?`, [new Date(now.getTime() - 2 * 86_400_000)]);
  await em.execute(`delete from subscription_rate_counters where window_start < ?`, [
    new Date(now.getTime() - 3_600_000),
  ]);
}

/** Prunes every `intervalMs` (billing's clock); returns a stop function. Safe on every replica. */
export function startCounterPruner(ctx: BillingContext, intervalMs: number): () => Promise<void> {
  return repeatEvery(intervalMs, () => pruneCounters(ctx.orm.em.fork(), ctx.clock()), ctx.log, "counter pruning");
}
