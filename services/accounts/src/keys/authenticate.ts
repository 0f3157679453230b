import { AppError } from "@mkt/runtime/errors";
import type { Principal } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { hashKey, looksLikeKey } from "./key-secret.ts";

/**
 * Resolves a bearer key to its principal (DESIGN.md §2, step 1): one indexed lookup by the key's
 * hash. Every failure is the same error, and the key itself is never logged or echoed.
 */
export async function authenticate(ctx: AccountsContext, apiKey: string): Promise<Principal> {
  const invalid = () => new AppError("invalid_api_key", "Invalid API key.");
  // Garbage (other vendors' keys, empty headers) costs no query.
  if (!looksLikeKey(apiKey)) throw invalid();
  const rows = await ctx.orm.em.fork().execute(
    `select k.id as key_id, k.subscription_id, k.product_id, k.hoster_id, a.id as account_id, a.email, a.tier
     from api_keys k join accounts a on a.id = k.account_id
     where k.key_hash = ? and k.revoked_at is null`,
    [hashKey(apiKey)],
  );
  const row = rows[0] as Record<string, string | null> | undefined;
  if (!row) throw invalid();
  return {
    accountId: row.account_id!,
    email: row.email!,
    keyId: row.key_id!,
    tier: row.tier!,
    scope: row.subscription_id
      ? { subscriptionId: row.subscription_id, productId: row.product_id ?? "", hosterId: row.hoster_id ?? "" }
      : undefined,
  };
}
