import { billingDb } from "../billing-db.ts";
import type { Em } from "../context.ts";
import type { FencedLease } from "./recall-types.ts";

/**
 * Fences every open lease of the account, inside the caller's transaction (the one that cancels,
 * pauses, marks past due or revokes), and returns them with their edges to recall. The wallet
 * lock (FOR UPDATE) conflicts with the lock grants and heartbeats take, so a heartbeat commits
 * wholly before the fence (and the fence freezes the deadline it set) or wholly after it (and
 * finds the lease fenced): a fenced lease is never extended or grown again. Its deadline is
 * frozen at its edge session's, read by a statement that starts after the lock is granted.
 */
export async function fenceLeases(em: Em, accountId: string, only?: string[]): Promise<FencedLease[]> {
  const db = await billingDb(em);
  await db
    .selectFrom("wallets as w")
    .select("w.account_id")
    .where("w.account_id", "=", accountId)
    .forUpdate()
    .execute();
  let fence = db
    .updateTable("leases as l")
    .from("edge_sessions as s")
    // BillingDb types a column read as the driver returns it (text); written, it is the same timestamptz.
    .set((eb) => ({ status: "fenced", deadline: eb.ref("s.deadline").$castTo<Date>() }))
    .whereRef("s.edge_id", "=", "l.edge_id")
    .where("l.account_id", "=", accountId)
    .where("l.status", "=", "open");
  // `only`: GrantLease's bounded recall fences just the leases whose room it takes back.
  if (only) fence = fence.where((eb) => eb("l.id", "=", eb.fn.any(eb.val(only))));
  const rows = await fence.returning(["l.id", "l.edge_id"]).execute();
  return rows.map((row) => ({ leaseId: row.id, edgeId: row.edge_id }));
}
