import type { Logger } from "@mkt/runtime/logger";
import { repeatEvery } from "@mkt/runtime/periodic";
import { RevalidateKeysRequest } from "@mkt/proto/accounts/v1/accounts";
import type { Backends } from "./backends.ts";
import type { PrincipalCache } from "./principal-cache.ts";

/**
 * Re-checks the principals in use with accounts every LEASE_TTL_MS / 2
 * (docs/adr/0018-revocation-waits-for-the-edges.md): a principal is good for one TTL past a check's
 * send time, so checking twice per TTL keeps one in use from lapsing even when a reply is slow, and
 * a key revoked without a `keys.revoked` reaching this edge is refused within one TTL. Returns the
 * stop function (it waits for a check in flight).
 */
export function startPrincipalRevalidation(
  cache: PrincipalCache,
  accounts: Backends["accounts"],
  log: Logger,
): () => Promise<void> {
  const check = async (keyIds: string[]) => {
    // A reply later than this could no longer extend anything.
    const { principals } = await accounts.revalidateKeys(
      RevalidateKeysRequest.fromPartial({ keyIds, edgeId: cache.edgeId }),
      {
        timeoutMs: cache.ttlMs - cache.marginMs,
      },
    );
    return principals;
  };
  return repeatEvery(
    Math.max(1, Math.floor(cache.ttlMs / 2)),
    () => cache.revalidate(check),
    log,
    "principal revalidation",
  );
}
