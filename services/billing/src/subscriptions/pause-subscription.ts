import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type { HosterSubscriber } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { hosterSubscriber } from "../earnings/hoster-subscribers.ts";
import { requireHoster } from "../earnings/hoster-plans.ts";
import { performance } from "node:perf_hooks";
import { fenceBudgets } from "../leases/fence-budgets.ts";
import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { Subscription } from "./subscription.entity.ts";

export interface SubscriberAction {
  hosterId: string;
  subscriptionId: string;
}

/**
 * The hoster pauses a subscriber of one of its plans (portal action). `hoster_paused_at` is the
 * hoster's decision and `status` what lease grants enforce: an active subscription becomes paused
 * (403 subscription_paused on its next request, its budgets fenced and recalled); a past-due one
 * stays past due and comes back paused once paid. Pausing again changes nothing.
 */
export async function pauseSubscription(
  ctx: BillingContext,
  req: SubscriberAction,
): Promise<{ subscriber: HosterSubscriber }> {
  return changeSubscriber(
    ctx,
    req,
    `hoster_paused_at = coalesce(hoster_paused_at, ?), status = case when status = 'active' then 'paused' else status end`,
    [ctx.clock()],
  );
}

/** Lifts the hoster's pause: paused → active; a past-due subscription stays past due until paid. */
export async function resumeSubscription(
  ctx: BillingContext,
  req: SubscriberAction,
): Promise<{ subscriber: HosterSubscriber }> {
  return changeSubscriber(
    ctx,
    req,
    `hoster_paused_at = null, status = case when status = 'paused' then 'active' else status end`,
    [],
  );
}

/**
 * Applies `set` to the subscription if it belongs to one of the hoster's plans and is live; a
 * cancelled one is answered unchanged (as cancelling it again is). Another hoster's, unknown,
 * malformed ids and attempts that never became subscriptions are all not_found, alike.
 */
async function changeSubscriber(
  ctx: BillingContext,
  req: SubscriberAction,
  set: string,
  params: unknown[],
): Promise<{ subscriber: HosterSubscriber }> {
  const hosterId = requireHoster(req.hosterId);
  const notFound = () => new AppError("not_found", "No such subscriber of your plans.", { param: "subscription_id" });
  if (!isUuid(req.subscriptionId)) throw notFound();
  const em = ctx.orm.em.fork();
  // A subscription that stops being active fences its lease budgets in the same transaction
  // (docs/architecture.md#revocation-stops-at-once); resuming fences nothing (GrantLease reopens a
  // budget).
  const { rows: updated, holders } = await em.transactional(async (tx) => {
    const rows = await tx.execute(
      `update subscriptions set ${set}
       where id = ? and hoster_id = ? and status in ('active', 'paused', 'past_due') returning *`,
      [...params, req.subscriptionId, hosterId],
    );
    const stopped = rows[0] && rows[0].status !== "active";
    return {
      rows,
      holders: stopped ? await fenceBudgets(tx, req.subscriptionId, rows[0]!.status as string, ctx.clock()) : [],
    };
  });
  // The hoster's answer waits for the holding edges' acks, or one TTL + margin.
  await ctx.recallLeases(holders, req.subscriptionId, performance.now() + fenceWaitMs(ctx.config.LEASE_TTL_MS));
  const changed = updated[0];
  const [row] = changed
    ? [changed]
    : await em.execute(`select * from subscriptions where id = ? and hoster_id = ? and status = 'cancelled'`, [
        req.subscriptionId,
        hosterId,
      ]);
  if (!row) throw notFound();
  return { subscriber: await hosterSubscriber(ctx, em, em.map(Subscription, row)) };
}
