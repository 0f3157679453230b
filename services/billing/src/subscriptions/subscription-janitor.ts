import type { BillingContext } from "../context.ts";
import { REPLAY_WINDOW_MS } from "./create-subscription.ts";
import { Subscription } from "./subscription.entity.ts";
import { revokeSubscriptionKey } from "./subscription-keys.ts";
import { repeatEvery } from "@mkt/runtime/periodic";

/**
 * A saga step waits at most 10 s on each of registry and accounts; an attempt still pending after
 * this long belongs to a process that died, and holds its plan slot until given up.
 */
export const ABANDON_AFTER_MS = 10 * 60_000;
const REVOKE_BATCH = 100;

export interface TidyResult {
  abandoned: number;
  revoked: number;
  erased: number;
  purged: number;
}

/**
 * One pass of housekeeping, safe on every replica at once (each step is idempotent):
 * 1. attempts pending too long fail (nothing was charged: the charge commits with activation);
 * 2. failed and cancelled subscriptions whose key revocation did not get through are retried;
 * 3. sealed secrets past the 24 h replay window are erased;
 * 4. failed attempts older than a day, their key settled, are deleted.
 */
export async function tidySubscriptions(ctx: BillingContext): Promise<TidyResult> {
  const now = ctx.clock().getTime();
  const em = ctx.orm.em.fork();
  const abandoned = await em.execute(
    `update subscriptions set status = 'failed', failure_code = 'abandoned'
     where status = 'pending' and created_at < ? returning id`,
    [new Date(now - ABANDON_AFTER_MS)],
  );

  const unrevoked = await em.execute(
    `select * from subscriptions
     where status in ('failed', 'cancelled') and key_requested_at is not null and key_revoked_at is null
     order by created_at limit ?`,
    [REVOKE_BATCH],
  );
  let revoked = 0;
  for (const raw of unrevoked) {
    const row = em.map(Subscription, raw);
    try {
      await revokeSubscriptionKey(ctx, row);
      revoked++;
    } catch (err) {
      ctx.log.warn({ err, subscriptionId: row.id }, "subscription key revocation still failing");
    }
  }

  const erased = await em.execute(
    `update subscriptions set sealed_api_key = null
     where sealed_api_key is not null and created_at < ? and status <> 'pending' returning id`,
    [new Date(now - REPLAY_WINDOW_MS)],
  );
  // A failed attempt is kept for a day (support can see why it failed), then dropped: bogus
  // product ids must not grow the table forever. Its key must be settled first.
  const purged = await em.execute(
    `delete from subscriptions
     where status = 'failed' and created_at < ? and (key_requested_at is null or key_revoked_at is not null)
     returning id`,
    [new Date(now - REPLAY_WINDOW_MS)],
  );
  const result = { abandoned: abandoned.length, revoked, erased: erased.length, purged: purged.length };
  if (result.abandoned + result.revoked + result.erased + result.purged > 0) {
    ctx.log.info(result, "subscriptions tidied");
  }
  return result;
}

/** Runs a pass every `intervalMs`; returns a stop function. */
export function startSubscriptionJanitor(ctx: BillingContext, intervalMs: number): () => Promise<void> {
  return repeatEvery(intervalMs, () => tidySubscriptions(ctx), ctx.log, "subscription janitor");
}
