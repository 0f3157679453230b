import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type {
  CancelSubscriptionRequest,
  CancelSubscriptionResponse,
  ListSubscriptionsResponse,
} from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { performance } from "node:perf_hooks";
import { fenceBudgets } from "../leases/fence-budgets.ts";
import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { requireAccount } from "../usage/usage-summary.ts";
import { Subscription } from "./subscription.entity.ts";
import { revokeSubscriptionKey } from "./subscription-keys.ts";
import { subscriptionMessage } from "./subscription-view.ts";

/** The account's subscriptions, newest first; attempts in progress and failed ones are not shown. */
export async function listSubscriptions(ctx: BillingContext, accountId: string): Promise<ListSubscriptionsResponse> {
  requireAccount(accountId);
  const em = ctx.orm.em.fork();
  const rows = await em.execute(
    `select * from subscriptions where account_id = ? and status in ('active', 'paused', 'past_due', 'cancelled')
     order by created_at desc, id`,
    [accountId],
  );
  return { subscriptions: rows.map((row) => subscriptionMessage(em.map(Subscription, row))) };
}

/**
 * Cancels the subscription (no refund), fences its lease budgets in the same transaction and
 * recalls them from their edges (answering once every holder acked or one TTL + margin passed,
 * docs/architecture.md#revocation-stops-at-once), then revokes its scoped key before answering. The
 * order matters: once cancelled, lease grants refuse the key whatever any cache says, so a
 * revocation that fails (accounts or NATS down) leaves no paid access open, and the caller's retry,
 * which finds the subscription cancelled and answers it unchanged, completes the revocation.
 */
export async function cancelSubscription(
  ctx: BillingContext,
  req: CancelSubscriptionRequest,
): Promise<CancelSubscriptionResponse> {
  requireAccount(req.accountId);
  // Malformed, unknown and other accounts' ids answer alike.
  const notFound = () => new AppError("not_found", "No such subscription.", { param: "subscription_id" });
  if (!isUuid(req.subscriptionId)) throw notFound();
  const em = ctx.orm.em.fork();
  const now = ctx.clock();
  // The cancel and the fence of the subscription's lease budgets commit together,
  // at one time: `cancelled_at` is the fence's time, which a repeated DELETE waits from.
  const { rows: cancelled, holders } = await em.transactional(async (tx) => {
    const rows = await tx.execute(
      `update subscriptions set status = 'cancelled', cancelled_at = ?
       where id = ? and account_id = ? and status in ('active', 'paused', 'past_due') returning *`,
      [now, req.subscriptionId, req.accountId],
    );
    return { rows, holders: rows[0] ? await fenceBudgets(tx, req.subscriptionId, "cancelled", now) : [] };
  });
  const [row] = cancelled[0]
    ? cancelled
    : await em.execute(`select * from subscriptions where id = ? and account_id = ? and status = 'cancelled'`, [
        req.subscriptionId,
        req.accountId,
      ]);
  if (!row) throw notFound();
  if (cancelled[0]) {
    await ctx.recallLeases(holders, req.subscriptionId, performance.now() + fenceWaitMs(ctx.config.LEASE_TTL_MS));
  } else {
    await recallAgain(ctx, req.subscriptionId, row.cancelled_at as Date);
  }
  let subscription = em.map(Subscription, row);
  if (subscription.keyRequestedAt && !subscription.keyRevokedAt) {
    subscription = await revokeSubscriptionKey(ctx, subscription).catch((err: unknown) => {
      ctx.log.warn({ err, subscriptionId: subscription.id }, "subscription cancelled, but its key is not revoked yet");
      throw new AppError(
        "service_unavailable",
        "The subscription is cancelled, but its API key could not be revoked yet; retry to complete it.",
      );
    });
  }
  return { subscription: subscriptionMessage(subscription) };
}

/**
 * A repeated DELETE waits for the same condition as the first: while the wait
 * since the fence has not passed, the edges still holding budgets the cancel fenced are asked
 * again (an edge that already dropped one acks at once) until they ack or the wait ends. Which
 * holders acked the first time is not stored, so asking again is how it is known.
 */
async function recallAgain(ctx: BillingContext, subscriptionId: string, fencedAt: Date | null): Promise<void> {
  if (!fencedAt) return;
  const left = new Date(fencedAt).getTime() + fenceWaitMs(ctx.config.LEASE_TTL_MS) - ctx.clock().getTime();
  if (left <= 0) return;
  const rows = await ctx.orm.em.fork().execute(
    `select b.lease_id, l.edge_id from lease_budgets b join leases l on l.id = b.lease_id
     where b.subscription_id = ? and b.status = 'fenced' and b.state = 'cancelled' and l.status <> 'closed'`,
    [subscriptionId],
  );
  const holders = rows.map((r) => ({ leaseId: r.lease_id as string, edgeId: r.edge_id as string }));
  await ctx.recallLeases(
    holders,
    subscriptionId,
    performance.now() + Math.min(left, fenceWaitMs(ctx.config.LEASE_TTL_MS)),
  );
}
