import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type {
  CancelSubscriptionRequest,
  CancelSubscriptionResponse,
  ListSubscriptionsResponse,
} from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
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
 * Cancels the subscription (no refund), then revokes its scoped key before answering. The order
 * matters: once cancelled, Authorize refuses the key whatever any cache says, so a revocation
 * that fails (accounts or NATS down) leaves no paid access open, and the caller's retry, which
 * finds the subscription cancelled and answers it unchanged, completes the revocation.
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
  const [cancelled] = await em.execute(
    `update subscriptions set status = 'cancelled', cancelled_at = ?
     where id = ? and account_id = ? and status in ('active', 'paused', 'past_due') returning *`,
    [ctx.clock(), req.subscriptionId, req.accountId],
  );
  const [row] = cancelled
    ? [cancelled]
    : await em.execute(`select * from subscriptions where id = ? and account_id = ? and status = 'cancelled'`, [
        req.subscriptionId,
        req.accountId,
      ]);
  if (!row) throw notFound();
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
