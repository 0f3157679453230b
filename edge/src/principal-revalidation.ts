import { performance } from "node:perf_hooks";
import type { Logger } from "@mkt/runtime/logger";
import { RevalidateKeysRequest } from "@mkt/proto/accounts/v1/accounts";
import type { Backends } from "./backends.ts";
import type { PrincipalCache } from "./principal-cache.ts";

/**
 * Re-checks the principals in use with accounts every PRINCIPAL_TTL_MS / 2 (accounts', from its
 * latest reply)
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
    const { principals, principalTtlMs } = await accounts.revalidateKeys(
      RevalidateKeysRequest.fromPartial({ keyIds, edgeId: cache.edgeId }),
      {
        timeoutMs: cache.ttlMs - cache.marginMs,
      },
    );
    cache.trustFor(Number(principalTtlMs));
    return principals;
  };
  // A loop rather than a fixed timer: the interval follows accounts' TTL as its replies give it.
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  // A check timed by the default TTL (before accounts' first reply) is re-timed by accounts'.
  cache.onTtlChange(() => wake?.());
  const loop = async () => {
    while (!stopped) {
      const startedAt = performance.now();
      await cache.revalidate(check).catch((err: unknown) => log.error({ err }, "principal revalidation failed"));
      for (;;) {
        const waitMs = startedAt + Math.max(1, Math.floor(cache.ttlMs / 2)) - performance.now();
        if (waitMs <= 0 || stopped) break;
        const ttlMs = cache.ttlMs;
        await new Promise<void>((resolve) => {
          wake = resolve;
          timer = setTimeout(resolve, waitMs);
          timer.unref();
        });
        clearTimeout(timer);
        if (cache.ttlMs === ttlMs) break;
      }
    }
  };
  const running = loop();
  return async () => {
    stopped = true;
    cache.onTtlChange(undefined);
    clearTimeout(timer);
    wake?.();
    await running;
  };
}
