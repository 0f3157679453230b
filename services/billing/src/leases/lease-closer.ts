import { repeatEvery } from "@mkt/runtime/periodic";
import { sql, type Expression } from "kysely";
import { billingDb, type LeaseWhere } from "../billing-db.ts";
import type { BillingContext } from "../context.ts";
import { releaseEndedLease } from "./lease-release.ts";
import { loadLeases, lockWallets } from "./lease-store.ts";

export interface CloseResult {
  /** Leases with no final report, closed at their deadline + their EDGE_ISOLATION_MS as fully admitted. */
  closed: number;
  /** Closed leases whose unsettled remainder was released (these included). */
  released: number;
}

const BATCH = 500;

/**
 * Which leases are due as of `now` (`isolationMs`, billing's EDGE_ISOLATION_MS, stands for the
 * bound of leases granted before each kept its own). An open or fenced lease with no final report
 * whose edge has not been heard from for its EDGE_ISOLATION_MS past its deadline: the edge's
 * session deadline is after its last call billing answered, and an edge cut off from billing that
 * long has ended every request it admitted (or died with them). The bound is the lease's own, the
 * one it was granted under: its edge runs by no longer one, and a billing restarted with a shorter
 * bound must not release it sooner. A fenced lease's own deadline may be the earlier one: its edge
 * may still be calling, and reports it final in its next heartbeat. A closed lease is due when its
 * release time has come.
 */
function due(now: Date, isolationMs: number): LeaseWhere {
  // Times are compared as the driver reads them (BillingDb): as text, in UTC.
  const at = now.toISOString();
  return (l) => {
    const session = l
      .selectFrom("edge_sessions as s")
      .select("s.deadline")
      .whereRef("s.edge_id", "=", "l.edge_id")
      .$asScalar();
    const isolatedBy = (deadline: Expression<string | null>) =>
      sql<boolean>`${deadline} + coalesce(${l.ref("l.isolation_ms")}, ${isolationMs}) * interval '1 millisecond' <= ${at}`;
    return l.and([
      l("l.released_at", "is", null),
      l.or([
        l.and([l("l.status", "=", "open"), isolatedBy(session)]),
        l.and([l("l.status", "=", "fenced"), isolatedBy(l.fn<string | null>("greatest", ["l.deadline", session]))]),
        l.and([l("l.status", "=", "closed"), l("l.release_at", "<=", at)]),
      ]),
    ]);
  };
}

/**
 * Closes and releases leases whose time has come: a lease with no final report
 * counts as fully admitted, its room staying used in its windows and its credit held, until its
 * deadline + the EDGE_ISOLATION_MS it was granted under; then what has not settled is released. Each lease in a
 * transaction of its own, after its account's wallet lock, re-checked under it.
 */
export async function closeDueLeases(ctx: BillingContext): Promise<CloseResult> {
  const now = ctx.clock();
  const isDue = due(now, ctx.config.EDGE_ISOLATION_MS);
  const result: CloseResult = { closed: 0, released: 0 };
  for (;;) {
    const db = await billingDb(ctx.orm.em.fork());
    const candidates = await db
      .selectFrom("leases as l")
      .select(["l.id", "l.account_id"])
      .where(isDue)
      .orderBy("l.created_at")
      .limit(BATCH)
      .execute();
    for (const candidate of candidates) {
      const closedBefore = result.closed;
      await ctx.orm.em.fork().transactional(async (em) => {
        const wallets = await lockWallets(em, [candidate.account_id]);
        // Due still, now that its wallet is locked (a final report may have closed it meanwhile).
        const [lease] = await loadLeases(em, (l) => l.and([l("l.id", "=", candidate.id), isDue(l)]));
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

/**
 * Runs closeDueLeases every `intervalMs`, and at once when `atStart`; returns a stop function. The
 * pass at start releases what came due while billing was down (a dead edge's slots and credit)
 * without waiting an interval (LEASE_TTL_MS) more.
 */
export function startLeaseCloser(ctx: BillingContext, intervalMs: number, atStart: boolean): () => Promise<void> {
  return repeatEvery(intervalMs, () => closeDueLeases(ctx), ctx.log, "lease closer", { atStart });
}
