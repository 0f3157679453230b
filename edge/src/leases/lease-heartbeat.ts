import type { Logger } from "@mkt/runtime/logger";
import { repeatEvery } from "@mkt/runtime/periodic";
import type { LeaseTable } from "./lease-table.ts";

/**
 * One heartbeat every LEASE_TTL_MS / 2 (docs/leases.md#settings): twice per TTL, so one lost reply still
 * leaves a lease extended before it lapses. The table skips beats while it backs off from a
 * failing billing. The first goes at once: it takes this process's incarnation, which releases
 * what an earlier process under the same EDGE_ID held, before any request needs it. Returns the
 * stop function (it waits for a beat in flight).
 */
export function startLeaseHeartbeat(table: LeaseTable, log: Logger): () => Promise<void> {
  const first = table.beat().catch((err: unknown) => log.error({ err }, "lease heartbeat failed"));
  const stop = repeatEvery(Math.max(1, Math.floor(table.ttlMs / 2)), () => table.beat(), log, "lease heartbeat");
  return async () => {
    await stop();
    await first;
  };
}
