import type { ExpressionBuilder, Kysely } from "kysely";
import { billingDb, prepare, type BillingDb } from "../billing-db.ts";
import type { Em } from "../context.ts";
import type { EdgeCaller } from "./edge-incarnation.ts";

// Each statement's shape is fixed: built and compiled once (prepare), bound per call. Times a
// query compares with are given as ISO text, as the driver reads them (BillingDb).

/** The edge's session row, made (sequence 0, deadline now) unless it exists. */
const OPEN_SESSION = prepare((p: { edgeId: string; now: Date }, db) =>
  db
    .insertInto("edge_sessions")
    .values({ edge_id: p.edgeId, sequence: 0n, deadline: p.now })
    .onConflict((oc) => oc.column("edge_id").doNothing()),
);

const LOCK_SESSION = prepare((p: { edgeId: string }, db) =>
  db.selectFrom("edge_sessions as s").select("s.deadline").where("s.edge_id", "=", p.edgeId).forUpdate(),
);

/**
 * The session's sequence and deadline, never lowered: greatest(), a delayed call never shortens
 * what an earlier one promised. Set from an expression of the column itself, cast to the type
 * written (BillingDb types what the driver reads).
 */
const raised = (eb: ExpressionBuilder<BillingDb, "edge_sessions">, p: { sequence: bigint; deadline: Date }) => ({
  sequence: eb.fn("greatest", ["sequence", eb.val(p.sequence)]).$castTo<bigint>(),
  deadline: eb.fn("greatest", ["deadline", eb.val(p.deadline)]).$castTo<Date>(),
});

const RENEW_SESSION = prepare((p: { edgeId: string; sequence: bigint; deadline: Date }, db) =>
  db
    .updateTable("edge_sessions")
    .set((eb) => raised(eb, p))
    .where("edge_id", "=", p.edgeId),
);

/** The caller's session's deadline, read without a lock. */
const CALLER_DEADLINE = prepare((p: { edgeId: string; incarnation: string; bootId: string }, db) =>
  db
    .selectFrom("edge_sessions as s")
    .select("s.deadline")
    .where("s.edge_id", "=", p.edgeId)
    .where("s.incarnation", "=", p.incarnation)
    .where("s.boot_id", "=", p.bootId),
);

const EXTEND_LIVE_SESSION = prepare(
  (p: { edgeId: string; sequence: bigint; deadline: Date; now: string; incarnation: string; bootId: string }, db) =>
    db
      .updateTable("edge_sessions")
      .set((eb) => raised(eb, p))
      .where("edge_id", "=", p.edgeId)
      .where("deadline", ">=", p.now)
      .where("incarnation", "=", p.incarnation)
      .where("boot_id", "=", p.bootId)
      .returning("deadline"),
);

const OPEN_LEASE_ACCOUNTS = prepare((p: { edgeId: string }, db) =>
  db
    .selectFrom("leases as l")
    .select("l.account_id")
    .distinct()
    .where("l.edge_id", "=", p.edgeId)
    .where("l.status", "=", "open"),
);

const FENCE_LAPSED = prepare((p: { edgeId: string; deadline: Date }, db) =>
  db
    .updateTable("leases")
    .set({ status: "fenced", deadline: p.deadline })
    .where("edge_id", "=", p.edgeId)
    .where("status", "=", "open"),
);

/** Makes the edge's session row unless it exists (renewSession, and a new incarnation). */
export async function openSession(db: Kysely<BillingDb>, edgeId: string, now: Date): Promise<void> {
  await OPEN_SESSION(db, { edgeId, now });
}

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
  const db = await billingDb(em);
  await openSession(db, edgeId, now);
  const [row] = await LOCK_SESSION(db, { edgeId });
  const previous = new Date(row!.deadline);
  await RENEW_SESSION(db, { edgeId, sequence, deadline: new Date(now.getTime() + ttlMs) });
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
  const db = await billingDb(em);
  const { edgeId, bootId } = caller;
  // Compared as the driver reads it (BillingDb): bigint as text.
  const incarnation = String(caller.incarnation);
  if (enoughMs !== undefined) {
    const [row] = await CALLER_DEADLINE(db, { edgeId, incarnation, bootId });
    const deadline = row ? new Date(row.deadline) : undefined;
    if (deadline && deadline.getTime() - now.getTime() >= enoughMs) return deadline;
  }
  const [row] = await EXTEND_LIVE_SESSION(db, {
    edgeId,
    sequence,
    deadline: new Date(now.getTime() + ttlMs),
    now: now.toISOString(),
    incarnation,
    bootId,
  });
  return row ? new Date(row.deadline) : undefined;
}

/** Accounts of the edge's open leases (whose wallets a lapsed session's fence must lock). */
export async function openLeaseAccounts(em: Em, edgeId: string): Promise<string[]> {
  const rows = await OPEN_LEASE_ACCOUNTS(await billingDb(em), { edgeId });
  return rows.map((row) => row.account_id);
}

/** Fences the open leases of a lapsed session at the deadline they had (wallets locked first). */
export async function fenceLapsed(em: Em, edgeId: string, deadline: Date): Promise<void> {
  await FENCE_LAPSED(await billingDb(em), { edgeId, deadline });
}
