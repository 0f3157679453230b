import { AppError } from "@mkt/runtime/errors";
import { repeatEvery } from "@mkt/runtime/periodic";
import type { BillingContext } from "../context.ts";
import { fetchProduct, type CurrentPlan } from "./plan.ts";
import { renewSubscription, RENEWING_SQL, type RenewalOutcome } from "./renew-subscription.ts";

const PAGE = 100;

export interface RenewalResult {
  renewed: number;
  pastDue: number;
  /** Taken by another replica, or no longer due; or its plan could not be read (retried next pass). */
  skipped: number;
}

/**
 * One renewal pass (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md): every subscription
 * whose period ended by `now` (active, paused or past due; of one account when `accountId` is
 * given) is renewed, each in its own transaction. Safe on every replica at once: rows are taken FOR
 * UPDATE SKIP LOCKED, so each is renewed once. The due rows are read in pages of (period_end, id)
 * order; the plans are read from registry per page, before any row is locked. A past-due
 * subscription is tried again on every pass, and at once after a top-up of its account
 * (AddCredits).
 */
export async function renewDueSubscriptions(
  ctx: BillingContext,
  now: Date = ctx.clock(),
  accountId?: string,
): Promise<RenewalResult> {
  const result: RenewalResult = { renewed: 0, pastDue: 0, skipped: 0 };
  const em = ctx.orm.em.fork();
  let after: { periodEnd: unknown; id: string } | undefined;
  for (;;) {
    const params: unknown[] = [now];
    let where = `status in (${RENEWING_SQL}) and period_end <= ?`;
    if (accountId) {
      where += ` and account_id = ?`;
      params.push(accountId);
    }
    if (after) {
      where += ` and (period_end, id) > (?::timestamptz, ?::uuid)`;
      params.push(after.periodEnd, after.id);
    }
    const due = (await em.execute(
      `select id, product_id, period_end from subscriptions where ${where} order by period_end, id limit ${PAGE}`,
      params,
    )) as Array<{ id: string; product_id: string; period_end: unknown }>;
    if (due.length === 0) break;
    const plans = await currentPlans(ctx, [...new Set(due.map((row) => row.product_id))]);
    for (const row of due) {
      const plan = plans.get(row.product_id);
      let outcome: RenewalOutcome = "skipped";
      if (plan !== "unavailable") {
        try {
          // A top-up's retry waits for a lock a request holds; a pass moves on and comes back.
          outcome = await renewSubscription(ctx, row.id, plan, now, accountId ? "wait" : "skip_locked");
        } catch (err) {
          ctx.log.error({ err, subscriptionId: row.id }, "subscription renewal failed; retried next pass");
        }
      }
      if (outcome === "renewed") result.renewed++;
      else if (outcome === "past_due") result.pastDue++;
      else result.skipped++;
    }
    const last = due[due.length - 1]!;
    after = { periodEnd: last.period_end, id: last.id };
    if (due.length < PAGE) break;
  }
  if (result.renewed + result.pastDue > 0) ctx.log.info({ ...result, accountId }, "subscriptions renewed");
  return result;
}

type PlanLookup = CurrentPlan | undefined | "unavailable";

/**
 * The plans as registry has them now, with their status (an archived plan's subscribers renew on
 * their own snapshot). A plan registry does not know is undefined (the snapshot, too); one that
 * could not be read is "unavailable", and its subscriptions wait for the next pass rather than
 * renew without knowing whether the plan got cheaper.
 */
async function currentPlans(ctx: BillingContext, productIds: string[]): Promise<Map<string, PlanLookup>> {
  const entries = await Promise.all(
    productIds.map(async (productId): Promise<[string, PlanLookup]> => {
      try {
        return [productId, await fetchProduct(ctx, productId)];
      } catch (err) {
        if (err instanceof AppError && err.code === "not_found") return [productId, undefined];
        ctx.log.warn({ err, productId }, "plan unavailable; its renewals wait for the next pass");
        return [productId, "unavailable"];
      }
    }),
  );
  return new Map(entries);
}

export interface RenewalScheduler {
  /** Runs one pass now, at `now` (tests move the clock); passes never overlap on one replica. */
  runOnce(now?: Date): Promise<RenewalResult>;
  stop(): Promise<void>;
}

/** Runs a pass every `intervalMs` (RENEWAL_INTERVAL_MS) on billing's clock. */
export function startRenewalScheduler(ctx: BillingContext, intervalMs: number): RenewalScheduler {
  let running: Promise<RenewalResult> | undefined;
  const runOnce = async (now = ctx.clock()): Promise<RenewalResult> => {
    while (running) await running.catch(() => undefined);
    running = renewDueSubscriptions(ctx, now).finally(() => (running = undefined));
    return running;
  };
  // A tick during a pass runOnce started does nothing, as a tick during its own pass does.
  const stopTimer = repeatEvery(intervalMs, () => (running ? Promise.resolve() : runOnce()), ctx.log, "renewal pass");
  return {
    runOnce,
    async stop() {
      await stopTimer();
      await running?.catch(() => undefined);
    },
  };
}
