import { AppError } from "@mkt/runtime/errors";
import { isUuid, newId } from "@mkt/runtime/ids";
import type { BillingContext } from "../context.ts";
import { addCalendarMonth } from "./calendar-month.ts";
import { fetchPlan } from "./plan.ts";
import { SNAPSHOT_SET, snapshotParams } from "./terms-snapshot.ts";
import { Subscription, type SubscriptionRow } from "./subscription.entity.ts";
import { issueSubscriptionKey, revokeSubscriptionKey, sealKey } from "./subscription-keys.ts";

const LIVE = `status in ('pending', 'active', 'paused', 'past_due')`;

const notOpen = () =>
  new AppError("forbidden", "This plan is not open: subscribe to it (POST /v1/subscriptions) to call its models.");

const cancelledHere = () =>
  new AppError(
    "forbidden",
    "You cancelled your subscription to this hoster's open plan: its models are no longer routed to you. " +
      "Subscribe to the plan (POST /v1/subscriptions) to use it again.",
  );

/**
 * The account's subscription to an open plan, for a grant whose request goes to one of its
 * endpoints (docs/routing.md#implicit-subscriptions): the live one, subscribed or implicit, or a new
 * implicit one (`origin = 'open'`: no key, no fee, active) made from the plan as registry has it
 * now. An implicit subscription snapshots nothing that matters: each such grant copies the plan's
 * current terms onto it, so its requests are priced and limited by the plan as it stands (there is
 * no fee to protect). One the customer cancelled keeps the hoster out of their routing (403); a
 * paused one is refused by the grant, as any paused subscription is.
 */
export async function openPlanSubscription(ctx: BillingContext, accountId: string, productId: string): Promise<string> {
  if (!isUuid(productId))
    throw new AppError("invalid_request", "open_product_id must be a UUID", { param: "open_product_id" });
  productId = productId.toLowerCase();
  const plan = await fetchPlan(ctx, productId);
  if (!plan.terms.open) throw notOpen();
  const em = ctx.orm.em.fork();
  // Twice at most: a concurrent first call may insert between the lookup and the insert.
  for (let attempt = 0; attempt < 2; attempt++) {
    const [live] = await em.execute(
      `select id, origin from subscriptions where account_id = ? and product_id = ? and ${LIVE}`,
      [accountId, productId],
    );
    if (live?.origin === "open") {
      await em.execute(`update subscriptions set ${SNAPSHOT_SET} where id = ? and origin = 'open'`, [
        ...snapshotParams(plan),
        live.id,
      ]);
      return live.id as string;
    }
    if (live) return live.id as string;
    const [cancelled] = await em.execute(
      `select 1 from subscriptions where account_id = ? and product_id = ? and origin = 'open' and status = 'cancelled'
        limit 1`,
      [accountId, productId],
    );
    if (cancelled) throw cancelledHere();
    const now = ctx.clock();
    // Made with its terms in one transaction: no grant ever sees it without them.
    const made = await em.transactional(async (tx) => {
      const [row] = await tx.execute(
        `insert into subscriptions (id, account_id, idempotency_key, product_id, status, origin, period_index,
           period_start, period_end, created_at, activated_at)
         values (?, ?, ?, ?, 'active', 'open', 1, ?, ?, ?, ?) on conflict do nothing returning id`,
        [newId(), accountId, `open:${productId}`, productId, now, addCalendarMonth(now), now, now],
      );
      if (row)
        await tx.execute(`update subscriptions set ${SNAPSHOT_SET} where id = ?`, [...snapshotParams(plan), row.id]);
      return row?.id as string | undefined;
    });
    if (made) {
      ctx.log.info({ accountId, productId, subscriptionId: made }, "implicit subscription to an open plan");
      return made;
    }
  }
  throw new AppError("service_unavailable", "The open plan's subscription could not be made; please retry.");
}

/**
 * POST /v1/subscriptions on an open plan the account already uses implicitly: a scoped key for
 * that subscription (it stays the one subscription to the plan, its origin `open`). Undefined
 * when the account has no such subscription without a key. One call claims the key (a concurrent
 * second one is already_subscribed); a failure gives the claim back.
 */
export async function keyForImplicitSubscription(
  ctx: BillingContext,
  accountId: string,
  productId: string,
  secret: string,
): Promise<{ row: SubscriptionRow } | undefined> {
  const em = ctx.orm.em.fork();
  const [found] = await em.execute(
    `select id from subscriptions where account_id = ? and product_id = ? and origin = 'open' and ${LIVE}
       and key_id is null`,
    [accountId, productId],
  );
  if (!found) return undefined;
  const id = found.id as string;
  const [claimed] = await em.execute(
    `update subscriptions set key_requested_at = ?, sealed_api_key = ?
      where id = ? and key_id is null and key_requested_at is null returning *`,
    [ctx.clock(), sealKey(ctx, id, secret), id],
  );
  if (!claimed) return undefined;
  const row = em.map(Subscription, claimed);
  try {
    const key = await issueSubscriptionKey(ctx, row, await fetchPlan(ctx, productId), secret);
    if (!key || key.revokedAt !== "")
      throw new AppError("service_unavailable", "The key could not be issued; try again.");
    const [keyed] = await em.execute(`update subscriptions set key_id = ? where id = ? returning *`, [key.keyId, id]);
    return { row: em.map(Subscription, keyed!) };
  } catch (err) {
    await revokeSubscriptionKey(ctx, row, secret).catch(() => undefined);
    await em.execute(
      `update subscriptions set key_requested_at = null, sealed_api_key = null, key_revoked_at = null where id = ?`,
      [id],
    );
    throw err;
  }
}
