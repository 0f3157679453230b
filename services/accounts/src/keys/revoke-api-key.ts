import { AppError } from "@mkt/runtime/errors";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import type { RevokeApiKeyRequest, RevokeApiKeyResponse } from "@mkt/proto/accounts/v1/accounts";
import { isUuid, type AccountsContext } from "../context.ts";
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
  // again answers the key unchanged.
  const rows = await em.execute(
    `update api_keys set revoked_at = coalesce(revoked_at, now()) where id = ? and account_id = ? returning *`,
    [req.keyId, req.accountId],
  );
  if (!rows[0]) throw notFound();
  const key = em.map(ApiKey, rows[0]);
  // Announced on every call, repeats included: a caller retrying after a failed announcement
  // is how a lost one gets delivered.
  await announceRevocation(ctx, key.id, key.accountId);
  return { key: apiKeyMessage(key) };
}

async function announceRevocation(ctx: AccountsContext, keyId: string, accountId: string): Promise<void> {
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
