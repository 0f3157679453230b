import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { SecretBoxError } from "@mkt/runtime/secret-box";
import type { BillingContext } from "../context.ts";
import type { Plan } from "./plan.ts";
import { Subscription, type SubscriptionRow } from "./subscription.entity.ts";

/** Bound into the sealed secret, so a ciphertext copied onto another row does not open. */
function sealContext(subscriptionId: string): string {
  return `subscription:${subscriptionId}:api_key`;
}

export function sealKey(ctx: BillingContext, subscriptionId: string, secret: string): string {
  return ctx.box.seal(secret, sealContext(subscriptionId));
}

/** The row's scoped-key secret while it is still kept (within the replay window), else "". */
export function openKey(ctx: BillingContext, row: SubscriptionRow): string {
  if (!row.sealedApiKey) return "";
  try {
    return ctx.box.open(row.sealedApiKey, sealContext(row.id));
  } catch (err) {
    if (!(err instanceof SecretBoxError)) throw err;
    ctx.log.error({ err, subscriptionId: row.id }, "a subscription's sealed key does not open");
    return "";
  }
}

/**
 * Asks accounts for the subscription's scoped key with its drawn secret (idempotent on the secret:
 * a retry gets the same key), named after the plan. The key, revoked already when the attempt was
 * given up meanwhile, or undefined.
 */
export async function issueSubscriptionKey(ctx: BillingContext, row: SubscriptionRow, plan: Plan, secret: string) {
  const { key } = await ctx.accounts.issueScopedKey(
    {
      accountId: row.accountId,
      scope: { subscriptionId: row.id, productId: plan.productId, hosterId: plan.hosterId },
      apiKey: secret,
      name: plan.terms.name.slice(0, 100),
    },
    { timeoutMs: 10_000 },
  );
  return key;
}

/**
 * Revokes the subscription's scoped key through accounts, which commits the revocation and
 * announces it on keys.revoked (every edge drops it) before answering; then records that it is
 * done. Passing the secret lets accounts store the key already revoked if it never got it, so an
 * issue call still in flight cannot bring it to life. Throws what accounts threw.
 */
export async function revokeSubscriptionKey(
  ctx: BillingContext,
  row: SubscriptionRow,
  secret = openKey(ctx, row),
): Promise<SubscriptionRow> {
  await ctx.accounts.revokeScopedKey(
    { accountId: row.accountId, subscriptionId: row.id, apiKey: secret },
    // Accounts answers once every edge holding the key has acked, or after one fence wait.
    { timeoutMs: fenceWaitMs(ctx.config.LEASE_TTL_MS) + 10_000 },
  );
  const em = ctx.orm.em.fork();
  const [updated] = await em.execute(
    `update subscriptions set key_revoked_at = coalesce(key_revoked_at, ?) where id = ? returning *`,
    [ctx.clock(), row.id],
  );
  return em.map(Subscription, updated!);
}
