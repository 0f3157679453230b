import type { Em } from "../context.ts";
import type { LeaseRow, WalletRow } from "./lease-rows.ts";
import { shiftHold } from "./lease-writes.ts";

/**
 * Releases what the wallet still holds for a lease whose requests have all ended. One that never
 * sent its final totals is first closed as fully admitted: everything granted counts as admitted,
 * so no request room goes back to its windows. Once released, the lease holds no credit, slot,
 * included token or key room; a usage event settling later is charged as a late one (what the
 * balance still has; the rest is written off). Returns whether the lease was closed here.
 */
export async function releaseEndedLease(em: Em, lease: LeaseRow, wallet: WalletRow, now: Date): Promise<boolean> {
  const closing = lease.status !== "closed";
  if (closing) {
    await em.execute(`update lease_allowances set admitted = granted where lease_id = ?`, [lease.id]);
    await em.execute(
      `update leases l set status = 'closed', closed_at = ?, release_at = ?,
         deadline = coalesce(l.deadline, (select s.deadline from edge_sessions s where s.edge_id = l.edge_id))
       where id = ?`,
      [now, now, lease.id],
    );
    lease.status = "closed";
  }
  await shiftHold(em, lease, wallet, -lease.heldMicros);
  await em.execute(`update leases set released_at = ? where id = ?`, [now, lease.id]);
  lease.releasedAt = now;
  return closing;
}
