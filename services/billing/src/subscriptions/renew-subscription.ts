import type { ProductTerms } from "@mkt/proto/registry/v1/registry";
import type { BillingContext } from "../context.ts";
import { performance } from "node:perf_hooks";
import { fenceBudgets } from "../leases/fence-budgets.ts";
import type { FencedLease } from "../leases/recall-types.ts";
import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { lockWallet, openWallet } from "../wallets/ledger.ts";
import { postFee } from "./activate-subscription.ts";
import { nextPeriod } from "./calendar-month.ts";
import { monthlyCharge, type CurrentPlan, type Plan } from "./plan.ts";
import { renewalTerms } from "./renewal-terms.ts";
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
 * Renews one subscription whose period has ended, in its own transaction, on `renewalTerms` of its
 * snapshot and `current` (the plan as registry has it, fetched before the transaction so no
 * network call runs under a lock; undefined when registry no longer knows it). The row
 * is taken `FOR UPDATE SKIP LOCKED` (or, after a top-up, waiting for the lock) and re-checked as
 * due, so replicas racing for it renew it once: the loser skips it, or finds it no longer due once
 * the winner has committed. A row skipped because a lease grant or cancel held it is renewed by
 * the next pass. The fee's journal reference is unique per (subscription, period), a second guard.
 *
 * Paid: one `subscription_fee` entry (hoster 80%) at the renewal terms' price, those terms stored
 * as the new snapshot (so they only ever improve for the subscriber), `period_index` + 1 (which
 * starts the included tokens afresh: they are counted per period index), the next period, and the
 * status back from past_due: `paused` if the hoster paused it meanwhile, else `active`. Short:
 * `past_due`, everything else (the snapshot included) as it was.
 */
export async function renewSubscription(
  ctx: BillingContext,
  subscriptionId: string,
  current: CurrentPlan | undefined,
  now: Date,
  lock: "skip_locked" | "wait" = "skip_locked",
): Promise<RenewalOutcome> {
  let holders: FencedLease[] = [];
  const outcome = await ctx.orm.em.fork().transactional(async (em): Promise<RenewalOutcome> => {
    // Waiting is as safe (the row is re-checked once the lock is ours), only slower in a pass.
    const [locked] = await em.execute(
      `select * from subscriptions where id = ? and status in (${RENEWING_SQL}) and period_end <= ?
       for update ${lock === "skip_locked" ? "skip locked" : ""}`,
      [subscriptionId, now],
    );
    if (!locked) return "skipped";
    const row = em.map(Subscription, locked);
    // Registry never deletes a plan, but if it did, the customer's own terms still hold.
    const labels = current?.plan ?? snapshotPlan(row);
    if (labels.hosterId !== row.hosterId) {
      throw new Error(`plan ${row.productId} changed hoster; subscription ${row.id} not renewed`);
    }
    const offer = current && { terms: current.plan.terms, archived: current.status !== "active" };
    // The plan's and hoster's names are labels, not terms: they follow the plan as it is now.
    const renewOn: Plan = { ...labels, terms: { ...labels.terms, ...renewalTerms(snapshotTerms(row), offer) } };

    const price = monthlyCharge(renewOn.terms);
    const periodIndex = row.periodIndex + 1;
    if (price > 0n) {
      await openWallet(em, row.accountId, ctx.config.STARTING_CREDIT_USD);
      const wallet = await lockWallet(em, row.accountId);
      if (price > wallet.posted - wallet.held) {
        if (row.status !== "past_due") {
          await em.execute(`update subscriptions set status = 'past_due' where id = ?`, [row.id]);
          // Past due refuses at once (402): its lease budgets are fenced in this transaction.
          holders = await fenceBudgets(em, row.id, "past_due", now);
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
    // The budgets in edges' leases hold the old period's terms snapshot: fenced, the next request
    // re-grants and gets the new terms (a raised limit reaches the subscriber at renewal).
    holders = await fenceBudgets(em, row.id, "active", now);
    return "renewed";
  });
  // Past due answers the pass only once the holding edges acked or one TTL + margin passed; a
  // renewal refuses nothing, so the pass goes on while its recalls run (they never reject).
  const recalled = ctx.recallLeases(holders, subscriptionId, performance.now() + fenceWaitMs(ctx.config.LEASE_TTL_MS));
  if (outcome === "past_due") await recalled;
  return outcome;
}

/** The subscription's own terms snapshot, as a plan. */
function snapshotPlan(row: SubscriptionRow): Plan {
  const terms: ProductTerms = {
    ...snapshotTerms(row),
    name: row.productName ?? "",
    description: "",
    pricingModel: row.pricingModel ?? "free",
    // A bought subscription's own terms: what it snapshots is never an open plan's.
    open: false,
  };
  return { productId: row.productId, hosterId: row.hosterId ?? "", hosterName: row.hosterName ?? "", terms };
}
