import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { fenceWaitMs } from "@mkt/runtime/fence-wait";
import { userInbox } from "@mkt/runtime/nats";
import { KeyRevoked, KeyRevokedAck } from "@mkt/proto/events/v1/events";
import type { RevokeApiKeyRequest, RevokeApiKeyResponse } from "@mkt/proto/accounts/v1/accounts";
import type { AccountsContext } from "../context.ts";
import { ApiKey } from "./api-key.entity.ts";
import { apiKeyMessage } from "./api-keys.ts";
import { keyHolders } from "./key-holders.ts";

/** How long a revocation waits for NATS to confirm the announcement before reporting failure. */
const ANNOUNCE_TIMEOUT_MS = 5_000;

/**
 * Revokes one of the account's keys and tells every edge
 * (docs/architecture.md#revocation-stops-at-once): the revocation is committed first, then
 * announced on keys.revoked, and answered once the edges holding the key have acked (or one TTL has
 * passed), so once the caller sees success no edge serves the key.
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
  // At or after the commit: the fence wait counts from here.
  const committedAt = performance.now();
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
  await announceRevocation(ctx, key.id, key.accountId, committedAt);
  return { key: apiKeyMessage(key) };
}

/**
 * Tells every edge that a committed revocation happened, then waits for the ones that matter
 * (docs/adr/0018-revocation-waits-for-the-edges.md): publishes keys.revoked with a reply subject
 * and waits for NATS to confirm it, then for a KeyRevokedAck from every edge recorded as holding
 * the key (`key_holders`), or until one fence wait has passed since `committedAt`
 * (performance.now), after which no edge uses the key anyway: an edge trusts a principal until its
 * last check's send time + TTL − margin, and no check answered after the commit returned the key.
 * The caller answers only after this returns. Fails with service_unavailable (the key stays
 * revoked) when NATS does not confirm in time, so the caller's retry re-announces.
 */
export async function announceRevocation(
  ctx: AccountsContext,
  keyId: string,
  accountId: string,
  committedAt = performance.now(),
): Promise<void> {
  const waiting = await keyHolders(ctx.orm.em.fork(), keyId);
  let allAcked!: () => void;
  const acked = new Promise<void>((resolve) => (allAcked = resolve));
  if (waiting.size === 0) allAcked();
  const inbox = userInbox("accounts");
  const acks = ctx.nc.subscribe(inbox, {
    callback: (err, msg) => {
      if (err) return;
      try {
        waiting.delete(KeyRevokedAck.decode(msg.data).edgeId);
      } catch {
        return; // not an ack: the wait covers its sender
      }
      if (waiting.size === 0) allAcked();
    },
  });
  let timer: NodeJS.Timeout | undefined;
  try {
    try {
      ctx.nc.publish(ctx.names.keysRevoked, KeyRevoked.encode({ keyId, accountId }).finish(), { reply: inbox });
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
    const left = committedAt + fenceWaitMs(ctx.config.PRINCIPAL_TTL_MS) - performance.now();
    const timedOut = await Promise.race([
      acked.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), Math.max(0, left)))),
    ]);
    if (timedOut && waiting.size > 0) {
      ctx.log.warn({ keyId, edges: [...waiting] }, "key revocation not acked by every holding edge; waited one TTL");
    }
  } finally {
    clearTimeout(timer);
    acks.unsubscribe();
  }
}
