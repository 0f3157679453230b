import type { Em } from "../context.ts";
import type { EdgeCaller } from "./edge-incarnation.ts";

/**
 * Renews the edge's session: its deadline, which every open lease of the edge shares, becomes
 * now + TTL on billing's clock (one row write extends them all). Returns the previous deadline
 * when it had already passed: the edge stopped admitting on those leases by its own clock, so
 * the caller must fence them (fenceLapsed) before anything extends them. Locks the session row,
 * which serializes one edge's calls (the common case, a session that has not lapsed,
 * is extended by extendLiveSession before the transaction instead).
 */
export async function renewSession(
  em: Em,
  edgeId: string,
  sequence: bigint,
  now: Date,
  ttlMs: number,
): Promise<Date | undefined> {
  await em.execute(
    `insert into edge_sessions (edge_id, sequence, deadline) values (?, 0, ?) on conflict (edge_id) do nothing`,
    [edgeId, now],
  );
  const [row] = await em.execute(`select deadline from edge_sessions where edge_id = ? for update`, [edgeId]);
  const previous = new Date(row!.deadline as string);
  // greatest(): a delayed call never shortens what an earlier one promised.
  await em.execute(
    `update edge_sessions set sequence = greatest(sequence, ?), deadline = greatest(deadline, ?) where edge_id = ?`,
    [sequence, new Date(now.getTime() + ttlMs), edgeId],
  );
  return previous < now ? previous : undefined;
}

/**
 * renewSession's common case, in a statement of its own committed before the caller's
 * transaction: extends a session that has not lapsed (deadline ≥ now). Inside the transaction the
 * session row stayed locked until commit, so every grant and heartbeat of one edge queued behind
 * the others' whole transactions (1,000 streams starting on 200 accounts waited seconds for it).
 * Committing it first is safe: it only extends billing's deadline for the edge's open leases (the
 * edge extends a lease's validity only from a reply, sent after this), and a fence or the closer
 * reads a deadline that is the same or later. Returns the session's deadline, or undefined when
 * the session is missing or has lapsed, or belongs to another incarnation (a superseded process
 * must not extend its successor's leases): the caller then calls renewSession in its
 * transaction, which fences what lapsed, and holdIncarnation, which refuses an older incarnation.
 *
 * With `enoughMs`, a deadline at least that far ahead is returned as it is, read without a write:
 * the caller's reply promises no more than the deadline (leaseState's validForMs). Grants pass
 * TTL / 2, which the edge's heartbeats (every TTL / 2, each to now + TTL) keep true, so the one row
 * every grant of an edge would otherwise update (and commit) in turn is written by heartbeats
 * alone: 1,000 accounts' grants queued on that row for 12 ms each.
 */
export async function extendLiveSession(
  em: Em,
  caller: EdgeCaller,
  sequence: bigint,
  now: Date,
  ttlMs: number,
  enoughMs?: number,
): Promise<Date | undefined> {
  if (enoughMs !== undefined) {
    const [row] = await em.execute(
      `select deadline from edge_sessions where edge_id = ? and incarnation = ? and boot_id = ?`,
      [caller.edgeId, caller.incarnation, caller.bootId],
    );
    const deadline = row ? new Date(row.deadline as string) : undefined;
    if (deadline && deadline.getTime() - now.getTime() >= enoughMs) return deadline;
  }
  const rows = await em.execute(
    `update edge_sessions set sequence = greatest(sequence, ?), deadline = greatest(deadline, ?)
     where edge_id = ? and deadline >= ? and incarnation = ? and boot_id = ? returning deadline`,
    [sequence, new Date(now.getTime() + ttlMs), caller.edgeId, now, caller.incarnation, caller.bootId],
  );
  return rows[0] ? new Date(rows[0].deadline as string) : undefined;
}

/** Accounts of the edge's open leases (whose wallets a lapsed session's fence must lock). */
export async function openLeaseAccounts(em: Em, edgeId: string): Promise<string[]> {
  const rows = await em.execute(`select distinct account_id from leases where edge_id = ? and status = 'open'`, [
    edgeId,
  ]);
  return rows.map((row) => row.account_id as string);
}

/** Fences the open leases of a lapsed session at the deadline they had (wallets locked first). */
export async function fenceLapsed(em: Em, edgeId: string, deadline: Date): Promise<void> {
  await em.execute(`update leases set status = 'fenced', deadline = ? where edge_id = ? and status = 'open'`, [
    deadline,
    edgeId,
  ]);
}
