import { AppError } from "@mkt/runtime/errors";
import type { Principal } from "@mkt/proto/accounts/v1/accounts";
import type { Em } from "../context.ts";

/** Which API key rows still act for someone: Authenticate and RevalidateKeys read keys through this one query. */
const LIVE_KEYS = `select k.id as key_id, k.subscription_id, k.product_id, k.hoster_id, a.id as account_id, a.email, a.tier
  from api_keys k join accounts a on a.id = k.account_id
  where k.revoked_at is null and (k.expires_at is null or k.expires_at > ?)`;

/**
 * The edge that will cache what is read (docs/adr/0018-revocation-waits-for-the-edges.md): recorded
 * as a holder of each key until now + 2 × TTL, in the statement that reads it. A check every
 * TTL / 2 while the key is in use keeps the row ahead of the edge's own use (last check + TTL); it
 * is rewritten only once less than one TTL is left, so an edge's checks do not write every row
 * every time.
 */
export interface Holder {
  edgeId: string;
  ttlMs: number;
  /**
   * Lock the key rows read (FOR SHARE) until the holder row commits, so a revocation committing
   * meanwhile waits for it and then sees this edge among the holders. Authenticate takes it (a new
   * holder has no row yet); a revalidation does not need it (its edge's row is already there).
   */
  lock: boolean;
}

/** An edge id (its EDGE_ID, letters, digits, `_` and `-`); '' (a caller that caches nothing) is allowed. */
export function checkedEdgeId(edgeId: string): string {
  if (edgeId === "" || /^[A-Za-z0-9_.-]{1,100}$/.test(edgeId)) return edgeId;
  throw new AppError("invalid_request", "edge_id must be 1 to 100 letters, digits, '_', '.' or '-'.", {
    param: "edge_id",
  });
}

/**
 * The principals of the live keys `where` selects (a condition on `k`, e.g. `k.key_hash = ?`),
 * as of `now`: revoked and expired keys are left out. With `holder`, its edge is recorded as
 * holding each key returned.
 */
export async function livePrincipals(
  em: Em,
  now: Date,
  where: string,
  params: unknown[],
  holder?: Holder,
): Promise<Principal[]> {
  const rows = holder?.edgeId
    ? await em.execute(
        `with live as (${LIVE_KEYS} and ${where}${holder.lock ? " for share of k" : ""}),
         held as (
           insert into key_holders (key_id, edge_id, holds_until)
           select key_id, ?, now() + 2 * ? * interval '1 millisecond' from live
           on conflict (key_id, edge_id) do update set holds_until = excluded.holds_until
           where key_holders.holds_until < now() + ? * interval '1 millisecond'
         )
         select * from live`,
        [now, ...params, holder.edgeId, holder.ttlMs, holder.ttlMs],
      )
    : await em.execute(`${LIVE_KEYS} and ${where}`, [now, ...params]);
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
