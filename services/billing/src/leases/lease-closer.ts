import { repeatEvery } from "@mkt/runtime/periodic";
import type { BillingContext } from "../context.ts";
import { releaseEndedLease } from "./lease-release.ts";
import { loadLeases, lockWallets } from "./lease-store.ts";

export interface CloseResult {
  /** Leases with no final report, closed at their deadline + EDGE_ISOLATION_MS as fully admitted. */
  closed: number;
  /** Closed leases whose unsettled remainder was released (these included). */
  released: number;
}

const BATCH = 500;

/**
 * Which leases are due, as of `?` (now − EDGE_ISOLATION_MS, twice) and `?` (now). An open or
 * fenced lease with no final report whose edge has not been heard from for EDGE_ISOLATION_MS
 * past its deadline: the edge's session deadline is after its last call billing answered, and an
 * edge cut off from billing that long has ended every request it admitted (or died with them). A
 * fenced lease's own deadline may be the earlier one: its edge may still be calling, and reports
 * it final in its next heartbeat. A closed lease is due when its release time has come.
 */
const DUE = `(l.released_at is null and (
    (l.status = 'open' and (select s.deadline from edge_sessions s where s.edge_id = l.edge_id) <= ?)
    or (l.status = 'fenced'
      and greatest(l.deadline, (select s.deadline from edge_sessions s where s.edge_id = l.edge_id)) <= ?)
    or (l.status = 'closed' and l.release_at <= ?)))`;

/**
 * Closes and releases leases whose time has come: a lease with no final report
 * counts as fully admitted, its room staying used in its windows and its credit held, until its
 * deadline + EDGE_ISOLATION_MS; then what has not settled is released. Each lease in a
 * transaction of its own, after its account's wallet lock, re-checked under it.
 */
export async function closeDueLeases(ctx: BillingContext): Promise<CloseResult> {
  const now = ctx.clock();
  const cutoff = new Date(now.getTime() - ctx.config.EDGE_ISOLATION_MS);
  const due = [cutoff, cutoff, now];
  const result: CloseResult = { closed: 0, released: 0 };
  for (;;) {
    const candidates = await ctx.orm.em
      .fork()
      .execute(`select l.id, l.account_id from leases l where ${DUE} order by l.created_at limit ?`, [...due, BATCH]);
    for (const candidate of candidates) {
      const closedBefore = result.closed;
      await ctx.orm.em.fork().transactional(async (em) => {
        const wallets = await lockWallets(em, [candidate.account_id as string]);
        const [lease] = await loadLeases(em, `l.id = ? and ${DUE}`, [candidate.id, ...due]);
        if (!lease) return;
        if (await releaseEndedLease(em, lease, wallets.get(lease.accountId)!, now)) result.closed++;
        result.released++;
      });
      // Counted once committed: a pass that throws has closed nothing more.
      if (result.closed > closedBefore) ctx.metrics.leasesClosedByDeadline.inc();
    }
    if (candidates.length < BATCH) break;
  }
  if (result.released > 0) ctx.log.info(result, "leases closed and released");
  return result;
}

/** Runs closeDueLeases every `intervalMs`; returns a stop function. */
export function startLeaseCloser(ctx: BillingContext, intervalMs: number): () => Promise<void> {
  return repeatEvery(intervalMs, () => closeDueLeases(ctx), ctx.log, "lease closer");
}
