import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import type { RevokeApiKeyRequest, RevokeApiKeyResponse } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { ApiKey } from "./api-key.entity.ts";
import { apiKeyMessage } from "./api-keys.ts";

/** How long a revocation waits for NATS to confirm the announcement before reporting failure. */
const ANNOUNCE_TIMEOUT_MS = 5_000;

/**
 * Revokes one of the account's keys and tells every edge (DESIGN.md §2): the revocation is
 * committed first, then announced on keys.revoked and flushed, and only then answered, so once
 * the caller sees success no edge keeps serving the key from its cache.
 */
export async function revokeApiKey(ctx: AccountsContext, req: RevokeApiKeyRequest): Promise<RevokeApiKeyResponse> {
  // Malformed, unknown and other accounts' ids all answer alike: nothing tells them apart.
  const notFound = () => new AppError("not_found", "No such API key.");
  if (!isUuid(req.accountId) || !isUuid(req.keyId)) throw notFound();
  const em = ctx.orm.em.fork();
  // One statement, committed on its own; coalesce keeps the first revocation time, so revoking
  // again answers the key unchanged. A subscription's key lives and dies with its subscription.
  const rows = await em.execute(
    `update api_keys set revoked_at = coalesce(revoked_at, now())
     where id = ? and account_id = ? and subscription_id is null returning *`,
    [req.keyId, req.accountId],
  );
  if (!rows[0]) {
    const [scoped] = await em.execute(`select subscription_id from api_keys where id = ? and account_id = ?`, [
      req.keyId,
      req.accountId,
    ]);
    if (!scoped) throw notFound();
    const subscriptionId = scoped.subscription_id as string;
    throw new AppError(
      "invalid_request",
      `This key belongs to subscription ${subscriptionId}; cancel the subscription (DELETE /v1/subscriptions/${subscriptionId}) to revoke it.`,
      { param: "key_id" },
    );
  }
  const key = em.map(ApiKey, rows[0]);
  // Announced on every call, repeats included: a caller retrying after a failed announcement
  // is how a lost one gets delivered.
  await announceRevocation(ctx, key.id, key.accountId);
  return { key: apiKeyMessage(key) };
}

/**
 * Publishes keys.revoked for a key whose revocation is committed and waits for NATS to confirm
 * it; the caller answers only after this returns. Fails with service_unavailable (the key stays
 * revoked) when NATS does not confirm in time, so the caller's retry re-announces.
 */
export async function announceRevocation(ctx: AccountsContext, keyId: string, accountId: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    ctx.nc.publish(ctx.names.keysRevoked, KeyRevoked.encode({ keyId, accountId }).finish());
    // flush() resolves once the server has processed everything sent before it, the publish
    // included; while NATS is unreachable it would wait for the reconnect, hence the deadline.
    await Promise.race([
      ctx.nc.flush(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("NATS flush timed out")), ANNOUNCE_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    ctx.log.error({ err, keyId }, "key revoked but the revocation could not be announced");
    throw new AppError(
      "service_unavailable",
      "The key is revoked, but the revocation could not be announced yet; retry to complete it.",
    );
  } finally {
    clearTimeout(timer);
  }
}
