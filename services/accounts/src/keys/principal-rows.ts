import type { Principal } from "@mkt/proto/accounts/v1/accounts";
import type { Em } from "../context.ts";

/** Which API key rows still act for someone: Authenticate and RevalidateKeys read keys through this one query. */
const LIVE_KEYS = `select k.id as key_id, k.subscription_id, k.product_id, k.hoster_id, a.id as account_id, a.email, a.tier
  from api_keys k join accounts a on a.id = k.account_id
  where k.revoked_at is null and (k.expires_at is null or k.expires_at > ?)`;

/**
 * The principals of the live keys `where` selects (a condition on `k`, e.g. `k.key_hash = ?`),
 * as of `now`: revoked and expired keys are left out.
 */
export async function livePrincipals(em: Em, now: Date, where: string, params: unknown[]): Promise<Principal[]> {
  const rows = await em.execute(`${LIVE_KEYS} and ${where}`, [now, ...params]);
  return (rows as Array<Record<string, string | null>>).map((row) => ({
    accountId: row.account_id!,
    email: row.email!,
    keyId: row.key_id!,
    tier: row.tier!,
    scope: row.subscription_id
      ? { subscriptionId: row.subscription_id, productId: row.product_id ?? "", hosterId: row.hoster_id ?? "" }
      : undefined,
  }));
}
