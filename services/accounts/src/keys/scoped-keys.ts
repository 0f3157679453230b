import { AppError } from "@mkt/runtime/errors";
import { isWellFormedApiKey } from "@mkt/runtime/api-key-format";
import { isUuid, newId } from "@mkt/runtime/ids";
import type {
  IssueScopedKeyRequest,
  IssueScopedKeyResponse,
  RevokeScopedKeyRequest,
  RevokeScopedKeyResponse,
} from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext, Em } from "../context.ts";
import { ApiKey } from "./api-key.entity.ts";
import { apiKeyMessage, keyName, requireAccountId } from "./api-keys.ts";
import { keySecret } from "./key-secret.ts";
import { announceRevocation } from "./revoke-api-key.ts";

const SCOPED_KEY_NAME = "subscription";

function requireUuid(value: string, param: string): void {
  if (!isUuid(value)) throw new AppError("invalid_request", `${param} must be a UUID.`, { param });
}

function requireSecret(apiKey: string): void {
  if (!isWellFormedApiKey(apiKey)) {
    throw new AppError("invalid_request", "api_key is not a key in the format accounts issues.", { param: "api_key" });
  }
}

/**
 * Stores a subscription's scoped key (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md).
 * Billing's saga draws the secret and keeps it sealed, so a retry can present the same secret and
 * get the same key back; accounts keeps only its hash, like every key's. One key per subscription
 * (a partial unique index): the same subscription with another secret or account is a caller bug.
 */
export async function issueScopedKey(
  ctx: AccountsContext,
  req: IssueScopedKeyRequest,
): Promise<IssueScopedKeyResponse> {
  requireAccountId(req.accountId);
  const scope = req.scope;
  requireUuid(scope?.subscriptionId ?? "", "scope.subscription_id");
  requireUuid(scope?.productId ?? "", "scope.product_id");
  requireUuid(scope?.hosterId ?? "", "scope.hoster_id");
  requireSecret(req.apiKey);
  const name = keyName(req.name, SCOPED_KEY_NAME);
  const { prefix, hash } = keySecret(req.apiKey);

  const em = ctx.orm.em.fork();
  // Selecting the account in the insert makes an unknown one insert nothing instead of failing
  // the foreign key; any unique conflict (this subscription's key exists) inserts nothing too.
  const inserted = await em.execute(
    `insert into api_keys (id, account_id, name, prefix, key_hash, subscription_id, product_id, hoster_id)
     select ?, a.id, ?, ?, ?, ?, ?, ? from accounts a where a.id = ?
     on conflict do nothing returning *`,
    [newId(), name, prefix, hash, scope!.subscriptionId, scope!.productId, scope!.hosterId, req.accountId],
  );
  if (inserted[0]) return { key: apiKeyMessage(em.map(ApiKey, inserted[0])) };

  const existing = await scopedKeyRow(em, scope!.subscriptionId);
  if (existing && existing.account_id === req.accountId.toLowerCase() && existing.key_hash === hash) {
    return { key: apiKeyMessage(em.map(ApiKey, existing)) };
  }
  if (!existing && (await em.execute(`select 1 from accounts where id = ?`, [req.accountId])).length === 0) {
    throw new AppError("not_found", "No such account.");
  }
  throw new AppError("idempotency_conflict", "This subscription already has another API key.", {
    param: "scope.subscription_id",
  });
}

/**
 * Revokes a subscription's key through the same steps as RevokeApiKey: the revocation commits,
 * is announced on keys.revoked and flushed, then answered. Idempotent. When the key is not there
 * (the saga gave up on an IssueScopedKey whose answer it never saw) and the secret is given, the
 * key is stored already revoked: an IssueScopedKey arriving late then finds it and cannot revive it.
 */
export async function revokeScopedKey(
  ctx: AccountsContext,
  req: RevokeScopedKeyRequest,
): Promise<RevokeScopedKeyResponse> {
  requireAccountId(req.accountId);
  requireUuid(req.subscriptionId, "subscription_id");
  if (req.apiKey !== "") requireSecret(req.apiKey);
  const em = ctx.orm.em.fork();

  let row = await revokeRow(em, req.accountId, req.subscriptionId);
  if (!row && req.apiKey !== "") {
    const { prefix, hash } = keySecret(req.apiKey);
    const [inserted] = await em.execute(
      `insert into api_keys (id, account_id, name, prefix, key_hash, subscription_id, revoked_at)
       select ?, a.id, ?, ?, ?, ?, now() from accounts a where a.id = ?
       on conflict do nothing returning *`,
      [newId(), SCOPED_KEY_NAME, prefix, hash, req.subscriptionId, req.accountId],
    );
    // A conflict means IssueScopedKey got there in between: revoke what it stored.
    row = inserted ?? (await revokeRow(em, req.accountId, req.subscriptionId));
  }
  if (!row) return {};
  const key = em.map(ApiKey, row);
  await announceRevocation(ctx, key.id, key.accountId);
  return { key: apiKeyMessage(key) };
}

async function scopedKeyRow(em: Em, subscriptionId: string): Promise<Record<string, unknown> | undefined> {
  const [row] = await em.execute(`select * from api_keys where subscription_id = ?`, [subscriptionId]);
  return row;
}

/** One committed statement; coalesce keeps the first revocation time. */
async function revokeRow(em: Em, accountId: string, subscriptionId: string) {
  const [row] = await em.execute(
    `update api_keys set revoked_at = coalesce(revoked_at, now())
     where subscription_id = ? and account_id = ? returning *`,
    [subscriptionId, accountId],
  );
  return row;
}
