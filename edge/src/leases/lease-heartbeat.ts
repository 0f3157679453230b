import type { Logger } from "@mkt/runtime/logger";
import type { LeaseTable } from "./lease-table.ts";

/**
 * One heartbeat every LEASE_TTL_MS / 2 (billing's, as its latest reply gave it:
 * docs/leases.md#settings), counted from the previous
 * beat's send: twice per TTL, so one lost reply still leaves a lease extended before it lapses.
 * A beat that took longer than that (a busy billing) is followed at once, not at the next tick
 * of a fixed timer: waiting for it left up to a whole interval more between two sends, and the
 * leases lapsed in that gap (a reply renews them for TTL from its beat's send). Beats never
 * overlap. The table skips beats while it backs off from a failing billing. The first goes at
 * once: it takes this process's incarnation, which releases what an earlier process under the
 * same EDGE_ID held, before any request needs it. Returns the stop function (it waits for a beat
 * in flight).
 */
export function startLeaseHeartbeat(table: LeaseTable, log: Logger): () => Promise<void> {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  const loop = async () => {
    while (!stopped) {
      const sentAt = performance.now();
      await table.beat().catch((err: unknown) => log.error({ err }, "lease heartbeat failed"));
      const waitMs = sentAt + Math.max(1, Math.floor(table.ttlMs / 2)) - performance.now();
      if (waitMs <= 0 || stopped) continue;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, waitMs);
        timer.unref();
      });
    }
  };
  const running = loop();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    wake?.();
    await running;
  };
}
