import { repeatEvery } from "@mkt/runtime/periodic";
import type { BillingContext } from "../context.ts";
import { loadLeases, lockWallets, shiftHold } from "./lease-store.ts";

export interface CloseResult {
  /** Leases with no final report, closed at deadline + MAX_REQUEST_MS as fully admitted. */
  closed: number;
  /** Closed leases whose unsettled remainder was released (these included). */
  released: number;
}

const BATCH = 500;

/**
 * Which leases are due, as of `?` (now) and `?` (now − MAX_REQUEST_MS): an open lease whose edge
 * session lapsed, or a fenced one, whose deadline is MAX_REQUEST_MS past (no final report came:
 * every request admitted on it has ended by now); a closed one whose release time has come.
 */
const DUE = `(l.released_at is null and (
    (l.status = 'open' and (select s.deadline from edge_sessions s where s.edge_id = l.edge_id) <= ?)
    or (l.status = 'fenced' and l.deadline <= ?)
    or (l.status = 'closed' and l.release_at <= ?)))`;

/**
 * Closes and releases leases whose time has come (DESIGN.md §2.3): a lease with no final report
 * counts as fully admitted, its room staying used in its windows and its credit held, until its
 * deadline + MAX_REQUEST_MS; then what has not settled is released. Each lease in a transaction
 * of its own, after its account's wallet lock, re-checked under it.
 */
export async function closeDueLeases(ctx: BillingContext): Promise<CloseResult> {
  const now = ctx.clock();
  const cutoff = new Date(now.getTime() - ctx.config.MAX_REQUEST_MS);
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
        if (lease.status !== "closed") {
          // Never reported: everything granted counts as admitted; no room goes back.
          await em.execute(`update lease_allowances set admitted = granted where lease_id = ?`, [lease.id]);
          await em.execute(
            `update leases l set status = 'closed', closed_at = ?, release_at = ?,
               deadline = coalesce(l.deadline, (select s.deadline from edge_sessions s where s.edge_id = l.edge_id))
             where id = ?`,
            [now, now, lease.id],
          );
          result.closed++;
        }
        await shiftHold(em, lease, wallets.get(lease.accountId)!, -lease.heldMicros);
        await em.execute(`update leases set released_at = ? where id = ?`, [now, lease.id]);
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
