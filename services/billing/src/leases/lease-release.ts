import { billingDb } from "../billing-db.ts";
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
    const closer = await billingDb(em);
    // A column set from another is cast to the type written: BillingDb types what the driver reads
    // (bigint and timestamptz as text), the columns are the same type in the database.
    await closer
      .updateTable("lease_allowances")
      .set((eb) => ({ admitted: eb.ref("granted").$castTo<bigint>() }))
      .where("lease_id", "=", lease.id)
      .execute();
    await closer
      .updateTable("leases as l")
      .set((eb) => ({
        status: "closed",
        closed_at: now,
        release_at: now,
        deadline: eb.fn
          .coalesce(
            "l.deadline",
            eb.selectFrom("edge_sessions as s").select("s.deadline").whereRef("s.edge_id", "=", "l.edge_id"),
          )
          .$castTo<Date | null>(),
      }))
      .where("l.id", "=", lease.id)
      .execute();
    lease.status = "closed";
  }
  await shiftHold(em, lease, wallet, -lease.heldMicros);
  // billingDb once more: it sends what shiftHold held back (batchWrites) first, as em.execute did.
  const db = await billingDb(em);
  await db.updateTable("leases").set({ released_at: now }).where("id", "=", lease.id).execute();
  lease.releasedAt = now;
  return closing;
}
