import { AppError } from "@mkt/runtime/errors";
import { newApiKey } from "@mkt/runtime/api-key-format";
import { isUuid, newId } from "@mkt/runtime/ids";
import type { CreateSubscriptionRequest, CreateSubscriptionResponse } from "@mkt/proto/billing/v1/billing";
import type { BillingContext, Em } from "../context.ts";
import { requireAccount } from "../usage/usage-summary.ts";
import { activateSubscription } from "./activate-subscription.ts";
import { fetchPlan, productNotFound } from "./plan.ts";
import { Subscription, type SubscriptionRow } from "./subscription.entity.ts";
import { issueSubscriptionKey, openKey, revokeSubscriptionKey, sealKey } from "./subscription-keys.ts";
import { LIVE_STATUSES, subscriptionMessage } from "./subscription-view.ts";
import { keyForImplicitSubscription } from "./implicit-subscription.ts";

/**
 * How long a replay returns the key, and how long its sealed secret is kept
 * (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md).
 */
export const REPLAY_WINDOW_MS = 24 * 3600_000;
const MAX_IDEMPOTENCY_KEY_CHARS = 255;

/** A transient failure: nothing was charged, and the same request may be sent again. */
const incomplete = () => new AppError("service_unavailable", "The subscription could not be completed; try again.");

const ALREADY_SUBSCRIBED = "You already have a subscription to this plan; cancel it before subscribing again.";
const alreadySubscribed = () => new AppError("already_subscribed", ALREADY_SUBSCRIBED, { param: "product_id" });

/**
 * CreateSubscription (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md). The `pending` row
 * comes first, so its unique keys settle every race before anything else happens: a second attempt
 * with the same Idempotency-Key finds the first (and replays or resumes it), a second subscription
 * to the same plan is already_subscribed. The scoped key's secret is drawn here and sealed into
 * that row, so resuming an attempt asks accounts for the very same key. Then: plan (registry) → key
 * (accounts) → charge and activate (one transaction). On failure the row becomes `failed`, which
 * frees both keys for a new attempt, and the scoped key is revoked.
 */
export async function createSubscription(
  ctx: BillingContext,
  req: CreateSubscriptionRequest,
): Promise<CreateSubscriptionResponse> {
  requireAccount(req.accountId);
  if (req.idempotencyKey.length > MAX_IDEMPOTENCY_KEY_CHARS) {
    throw new AppError("invalid_request", `Idempotency-Key must be at most ${MAX_IDEMPOTENCY_KEY_CHARS} characters.`, {
      param: "Idempotency-Key",
    });
  }
  // Product ids are UUIDs; anything else cannot name a plan. Compared as Postgres writes them.
  if (!isUuid(req.productId)) throw productNotFound();
  req = { ...req, productId: req.productId.toLowerCase() };

  const em = ctx.orm.em.fork();
  // Without a key every call is its own attempt: the row's id stands in for it.
  const id = newId();
  const idempotencyKey = req.idempotencyKey === "" ? `none:${id}` : `key:${req.idempotencyKey}`;
  const secret = newApiKey();
  // Twice at most: a conflicting attempt may fail (freeing its keys) between insert and lookup.
  for (let attempt = 0; ; attempt++) {
    const [inserted] = await em.execute(
      `insert into subscriptions (id, account_id, idempotency_key, product_id, status, sealed_api_key, created_at)
       values (?, ?, ?, ?, 'pending', ?, ?) on conflict do nothing returning *`,
      [id, req.accountId, idempotencyKey, req.productId, sealKey(ctx, id, secret), ctx.clock()],
    );
    if (inserted) return runSaga(ctx, em.map(Subscription, inserted), secret);

    const [existing] = await em.execute(
      `select * from subscriptions where account_id = ? and idempotency_key = ? and status <> 'failed'`,
      [req.accountId, idempotencyKey],
    );
    if (existing) {
      const earlier = em.map(Subscription, existing);
      if (earlier.productId !== req.productId) {
        const message = "This Idempotency-Key was already used to subscribe to another plan.";
        throw new AppError("idempotency_conflict", message, { param: "Idempotency-Key" });
      }
      if (earlier.status !== "pending") return replay(ctx, earlier);
      // The first attempt has not finished (it is running, or its process died): carry it on with
      // its own secret. Every step is idempotent, and activation happens once under a row lock.
      const sealedSecret = openKey(ctx, earlier);
      if (!sealedSecret) throw incomplete();
      return runSaga(ctx, earlier, sealedSecret);
    }
    // A plan the account already uses implicitly (an open plan): its subscription gets the key.
    const keyed = await keyForImplicitSubscription(ctx, req.accountId, req.productId, secret);
    if (keyed) return { subscription: subscriptionMessage(keyed.row), apiKey: secret, replayed: false };
    if (await liveSubscription(em, req.accountId, req.productId)) throw alreadySubscribed();
    if (attempt >= 1) throw incomplete();
  }
}

async function liveSubscription(em: Em, accountId: string, productId: string): Promise<boolean> {
  const rows = await em.execute(
    `select 1 from subscriptions
     where account_id = ? and product_id = ? and status in ('pending', 'active', 'paused', 'past_due')`,
    [accountId, productId],
  );
  return rows.length > 0;
}

async function runSaga(ctx: BillingContext, row: SubscriptionRow, secret: string): Promise<CreateSubscriptionResponse> {
  let outcome: { row: SubscriptionRow; activated: boolean };
  try {
    const plan = await fetchPlan(ctx, row.productId);
    // From here on a key may exist, so a failure must revoke it.
    const markRequested = `update subscriptions set key_requested_at = coalesce(key_requested_at, ?) where id = ?`;
    await ctx.orm.em.fork().execute(markRequested, [ctx.clock(), row.id]);
    const key = await issueSubscriptionKey(ctx, row, plan, secret);
    // Revoked already: this attempt was given up (by a racing retry or the janitor) meanwhile.
    if (!key || key.revokedAt !== "") throw incomplete();
    outcome = await activateSubscription(ctx, row.id, plan, key.keyId);
  } catch (err) {
    const settled = await abandon(ctx, row, secret, err).catch((abandonErr: unknown) => {
      // The row stays pending; the janitor gives it up (and revokes its key) later.
      ctx.log.error({ err: abandonErr, subscriptionId: row.id }, "could not record a failed subscription attempt");
      return undefined;
    });
    // A racing attempt at the same row finished it: answer with its result, not our failure.
    if (settled) return replay(ctx, settled);
    throw err;
  }
  if (outcome.activated) return { subscription: subscriptionMessage(outcome.row), apiKey: secret, replayed: false };
  // Another attempt at this row got there first: it activated it (a replay) or gave it up.
  if ((LIVE_STATUSES as readonly string[]).includes(outcome.row.status) || outcome.row.status === "cancelled") {
    return replay(ctx, outcome.row);
  }
  throw incomplete();
}

/**
 * Fails the attempt and revokes its key, leaving nothing charged (the charge is in the activation
 * transaction, which rolled back). Returns the row instead when another attempt at it activated
 * it first. A key that cannot be revoked now is left to the janitor, which retries.
 */
async function abandon(
  ctx: BillingContext,
  row: SubscriptionRow,
  secret: string,
  cause: unknown,
): Promise<SubscriptionRow | undefined> {
  const code = cause instanceof AppError ? cause.code : "internal_error";
  const em = ctx.orm.em.fork();
  const [failed] = await em.execute(
    `update subscriptions set status = 'failed', failure_code = ? where id = ? and status = 'pending' returning *`,
    [code, row.id],
  );
  if (!failed) {
    const [current] = await em.execute(`select * from subscriptions where id = ?`, [row.id]);
    const settled = current ? em.map(Subscription, current) : undefined;
    return settled && (LIVE_STATUSES as readonly string[]).includes(settled.status) ? settled : undefined;
  }
  const failedRow = em.map(Subscription, failed);
  if (failedRow.keyRequestedAt) {
    await revokeSubscriptionKey(ctx, failedRow, secret).catch((err: unknown) =>
      ctx.log.warn(
        { err, subscriptionId: row.id },
        "could not revoke a failed subscription's key yet; the janitor retries",
      ),
    );
  }
  return undefined;
}

/** The answer to a retry: the subscription as it is now, with its key while the window lasts. */
function replay(ctx: BillingContext, row: SubscriptionRow): CreateSubscriptionResponse {
  const inWindow = ctx.clock().getTime() - row.createdAt.getTime() < REPLAY_WINDOW_MS;
  return { subscription: subscriptionMessage(row), apiKey: inWindow ? openKey(ctx, row) : "", replayed: true };
}
