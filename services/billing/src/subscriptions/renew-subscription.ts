import type { ProductTerms } from "@mkt/proto/registry/v1/registry";
import type { BillingContext } from "../context.ts";
import { lockWallet, openWallet } from "../wallets/ledger.ts";
import { postFee } from "./activate-subscription.ts";
import { nextPeriod } from "./calendar-month.ts";
import { monthlyCharge, type Plan } from "./plan.ts";
import { Subscription, type SubscriptionRow } from "./subscription.entity.ts";
import { SNAPSHOT_SET, snapshotParams } from "./terms-snapshot.ts";
import { snapshotTerms } from "./subscription-view.ts";

/** Statuses that renew at period_end: a paused subscription renews too, a cancelled one never. */
export const RENEWING_STATUSES = ["active", "paused", "past_due"] as const;
export const RENEWING_SQL = RENEWING_STATUSES.map((s) => `'${s}'`).join(", ");

/**
 * renewed: charged (or free) and moved to its next period; past_due: the balance is short, so it
 * waits for a top-up; skipped: not ours to renew now (another replica holds it, it was renewed,
 * cancelled or paid meanwhile).
 */
export type RenewalOutcome = "renewed" | "past_due" | "skipped";

/**
 * Renews one subscription whose period has ended, in its own transaction, on `plan` (the plan's
 * current terms, fetched before the transaction so no network call runs under a lock). The row
 * is taken `FOR UPDATE SKIP LOCKED` (or, after a top-up, waiting for the lock) and re-checked as
 * due, so replicas racing for it renew it once: the loser skips it, or finds it no longer due once
 * the winner has committed. A row skipped because a request's Authorize held it is renewed by the
 * next pass. The fee's journal reference is unique per (subscription, period), a second guard.
 *
 * Paid: one `subscription_fee` entry (hoster 80%), the terms snapshot refreshed (a hoster's edit
 * applies from here), `period_index` + 1 (which starts the included tokens afresh: they are
 * counted per period index), the next period, and the status back from past_due: `paused` if the
 * hoster paused it meanwhile, else `active`. Short: `past_due`, everything else as it was.
 */
export async function renewSubscription(
  ctx: BillingContext,
  subscriptionId: string,
  plan: Plan | undefined,
  now: Date,
  lock: "skip_locked" | "wait" = "skip_locked",
): Promise<RenewalOutcome> {
  return ctx.orm.em.fork().transactional(async (em) => {
    // Waiting is as safe (the row is re-checked once the lock is ours), only slower in a pass.
    const [locked] = await em.execute(
      `select * from subscriptions where id = ? and status in (${RENEWING_SQL}) and period_end <= ?
       for update ${lock === "skip_locked" ? "skip locked" : ""}`,
      [subscriptionId, now],
    );
    if (!locked) return "skipped";
    const row = em.map(Subscription, locked);
    // Registry never deletes a plan, but if it did, the customer's own terms still hold.
    const renewOn = plan ?? snapshotPlan(row);
    if (renewOn.hosterId !== row.hosterId) {
      throw new Error(`plan ${row.productId} changed hoster; subscription ${row.id} not renewed`);
    }

    const price = monthlyCharge(renewOn.terms);
    const periodIndex = row.periodIndex + 1;
    if (price > 0n) {
      await openWallet(em, row.accountId, ctx.config.STARTING_CREDIT_USD);
      const wallet = await lockWallet(em, row.accountId);
      if (price > wallet.posted - wallet.held) {
        if (row.status !== "past_due") {
          await em.execute(`update subscriptions set status = 'past_due' where id = ?`, [row.id]);
        }
        return "past_due";
      }
      await postFee(
        em,
        { subscriptionId: row.id, periodIndex, accountId: row.accountId, hosterId: row.hosterId! },
        price,
        now,
      );
    }

    const period = nextPeriod(row.activatedAt ?? row.periodStart!, row.periodEnd!, now);
    await em.execute(
      `update subscriptions set ${SNAPSHOT_SET},
         status = case when hoster_paused_at is null then 'active' else 'paused' end,
         period_index = ?, period_start = ?, period_end = ?
       where id = ?`,
      [...snapshotParams(renewOn), periodIndex, period.start, period.end, row.id],
    );
    return "renewed";
  });
}

/** The subscription's own terms snapshot, as a plan. */
function snapshotPlan(row: SubscriptionRow): Plan {
  const terms: ProductTerms = {
    ...snapshotTerms(row),
    name: row.productName ?? "",
    description: "",
    pricingModel: row.pricingModel ?? "free",
  };
  return { productId: row.productId, hosterId: row.hosterId ?? "", hosterName: row.hosterName ?? "", terms };
}
