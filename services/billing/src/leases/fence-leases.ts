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
  await em.execute(`select account_id from wallets where account_id = ? for update`, [accountId]);
  // `only`: GrantLease's bounded recall fences just the leases whose room it takes back.
  const which = only ? ` and l.id in (${[...only, null].map(() => "?").join(", ")})` : "";
  const rows = await em.execute(
    `update leases l set status = 'fenced', deadline = s.deadline
     from edge_sessions s
     where s.edge_id = l.edge_id and l.account_id = ? and l.status = 'open'${which}
     returning l.id, l.edge_id`,
    [accountId, ...(only ? [...only, null] : [])],
  );
  return rows.map((row) => ({ leaseId: row.id as string, edgeId: row.edge_id as string }));
}
