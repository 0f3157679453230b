import { billingDb } from "../billing-db.ts";
import type { Em } from "../context.ts";
import type { FencedLease } from "./recall-types.ts";

/**
 * Fences every open budget of the subscription, inside the caller's transaction: the one that
 * cancels, pauses or marks it past due, after its UPDATE of the subscription row
 * (docs/architecture.md#revocation-stops-at-once). Grants and heartbeats lock that row FOR SHARE
 * before reading budgets, so one that races the change commits wholly before it (and this fence
 * catches what it granted) or reads the budget fenced and never extends or grows it again; only
 * GrantLease reopens a budget, and only for an active subscription. `state` is what the edge is
 * told: paused, past_due or cancelled. Returns the leases and edges to recall (the NATS recall is a
 * later increment).
 */
export async function fenceBudgets(em: Em, subscriptionId: string, state: string, now: Date): Promise<FencedLease[]> {
  const db = await billingDb(em);
  const rows = await db
    .updateTable("lease_budgets as b")
    .set({ status: "fenced", state, fenced_at: now })
    .from("leases as l")
    .whereRef("l.id", "=", "b.lease_id")
    .where("b.subscription_id", "=", subscriptionId)
    .where("b.status", "=", "open")
    .returning(["b.lease_id", "l.edge_id"])
    .execute();
  return rows.map((row) => ({ leaseId: row.lease_id, edgeId: row.edge_id }));
}
