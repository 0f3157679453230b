import { AppError } from "@mkt/runtime/errors";
import { uuidV7Time } from "@mkt/runtime/ids";
import { billingDb, prepare, type LeaseWhere } from "../billing-db.ts";
import type { BillingContext, Em } from "../context.ts";
import { int8 } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import { openSession } from "./edge-session.ts";
import { releaseEndedLease } from "./lease-release.ts";
import { loadLeases, lockWalletsOf } from "./lease-store.ts";

/** Who makes a lease call: the edge's stable id, and which of its processes. */
export interface EdgeCaller {
  edgeId: string;
  /** The incarnation the process was given; 0 on its first calls. */
  incarnation: bigint;
  /** The random id the process drew at start. */
  bootId: string;
}

// Each statement built and compiled once (prepare), bound per call: holdIncarnation runs in every
// grant and heartbeat transaction. lock_edge_incarnation and hold_edge_incarnation are database
// functions (the migration Migration20270131000000HeartbeatWrites makes them), not tables: BillingDb
// cannot type their results, so each is called through `fn` with its result type declared.

/** Takes the edge's incarnation lock exclusively, until commit. */
const LOCK_INCARNATION = prepare((p: { edgeId: string }, db) =>
  db.selectNoFrom((eb) => eb.fn<null>("lock_edge_incarnation", [eb.val(p.edgeId)]).as("locked")),
);

/** Holds the edge's incarnation lock shared until commit; true when `incarnation` is its newest. */
const HOLD_INCARNATION = prepare((p: { edgeId: string; incarnation: bigint; bootId: string }, db) =>
  db.selectNoFrom((eb) =>
    eb.fn<boolean>("hold_edge_incarnation", [eb.val(p.edgeId), eb.val(p.incarnation), eb.val(p.bootId)]).as("held"),
  ),
);

/** The session row, locked: the incarnation and boot id it has. */
const SESSION_INCARNATION = prepare((p: { edgeId: string }, db) =>
  db
    .selectFrom("edge_sessions as s")
    .select(["s.incarnation", "s.boot_id"])
    .where("s.edge_id", "=", p.edgeId)
    .forUpdate(),
);

const SET_INCARNATION = prepare((p: { edgeId: string; incarnation: bigint; bootId: string }, db) =>
  db
    .updateTable("edge_sessions")
    .set({ incarnation: p.incarnation, boot_id: p.bootId })
    .where("edge_id", "=", p.edgeId),
);

/**
 * The incarnation a lease call is served in. A process that has none yet (0) takes the edge's
 * next one, or the one a call of its own took meanwhile (same boot id): a restarted edge's first
 * calls race, and must not take two. The caller's transaction then checks it with holdIncarnation.
 */
export async function incarnationOf(ctx: BillingContext, caller: EdgeCaller): Promise<bigint> {
  if (caller.incarnation > 0n) return caller.incarnation;
  const started = await withDeadlockRetry(() =>
    ctx.orm.em.fork().transactional((em) => startIncarnation(em, caller, ctx.clock())),
  );
  if (started.closed !== undefined) {
    ctx.announceIncarnation(caller.edgeId, started.incarnation);
    ctx.metrics.edgeIncarnations.inc();
    ctx.metrics.leasesClosedByIncarnation.inc(started.closed);
    ctx.log.info(
      { edgeId: caller.edgeId, incarnation: started.incarnation, closedLeases: started.closed },
      "edge incarnation started: the older incarnations' leases are closed and released",
    );
  }
  return started.incarnation;
}

/**
 * Takes the edge's next incarnation for this process (or finds the one it took), and closes and
 * releases every lease of the older incarnations in the same transaction: a process that started
 * again under the same id holds none of them, so their slots and credit must not wait for their
 * deadline. The edge's incarnation lock (exclusive) is held until commit, so a call of an older
 * incarnation still running (holdIncarnation) commits wholly before (its leases closed here) or
 * is refused after.
 * `closed` is undefined when no incarnation was started.
 */
async function startIncarnation(
  em: Em,
  caller: EdgeCaller,
  now: Date,
): Promise<{ incarnation: bigint; closed?: number }> {
  // Before anything else: the lease calls in flight (holdIncarnation) commit first.
  const db = await billingDb(em);
  await LOCK_INCARNATION(db, { edgeId: caller.edgeId });
  await openSession(db, caller.edgeId, now);
  const [row] = await SESSION_INCARNATION(db, { edgeId: caller.edgeId });
  if (row!.boot_id === caller.bootId) return { incarnation: int8(row!.incarnation) };
  // The first call of a process that started before the edge's current one, arriving after it
  // (held up behind this lock, or sent just before that process died), must not take the id back
  // and supersede the live process: the one started last owns the id.
  if (startedBefore(caller.bootId, row!.boot_id)) throw superseded(caller);
  const incarnation = int8(row!.incarnation) + 1n;
  await SET_INCARNATION(db, { edgeId: caller.edgeId, incarnation, bootId: caller.bootId });
  const held: LeaseWhere = (l) => l.and([l("l.edge_id", "=", caller.edgeId), l("l.released_at", "is", null)]);
  const wallets = await lockWalletsOf(em, held);
  const leases = await loadLeases(em, held);
  let closed = 0;
  for (const lease of leases) {
    if (await releaseEndedLease(em, lease, wallets.get(lease.accountId)!, now)) closed++;
  }
  return { incarnation, closed };
}

/**
 * Inside a lease call's transaction, before it locks or reads anything of the edge's leases:
 * refuses the call unless its incarnation is the edge's newest. It holds the edge's incarnation
 * lock shared until commit (hold_edge_incarnation, in the migration that made it), so one edge's
 * calls run side by side while startIncarnation, which takes it exclusively, waits for them, and
 * a call after it reads the new incarnation and is refused. An advisory lock rather than
 * FOR KEY SHARE on the session row: the row lock wrote the row's header (a WAL record) on every
 * call and, as soon as two calls of the edge overlapped (a heartbeat's transactions always do),
 * a MultiXact; the advisory lock lives in the lock manager's memory and writes nothing. Checking
 * the incarnation in the WHERE of the call's writes instead would not do: nothing would keep a
 * new incarnation from closing the edge's leases between that check and the commit, nor order a
 * grant's new lease before its close.
 */
export async function holdIncarnation(em: Em, caller: EdgeCaller): Promise<void> {
  const [row] = await HOLD_INCARNATION(await billingDb(em), caller);
  if (row?.held === true) return;
  throw superseded(caller);
}

/**
 * Whether the process of boot id `a` started before that of `b`: edges mint their boot ids as
 * UUIDv7s, whose first 48 bits are the start's wall-clock millisecond. Unknown (false) unless both
 * are v7 (an edge of an earlier release sends a v4 id) and their milliseconds differ. Two hosts'
 * clocks are compared here, so this assumes they agree to within the seconds a restart takes.
 */
function startedBefore(a: string, b: string | null): boolean {
  const at = uuidV7Time(a);
  const bt = b === null ? undefined : uuidV7Time(b);
  return at !== undefined && bt !== undefined && at.getTime() < bt.getTime();
}

function superseded(caller: EdgeCaller): AppError {
  return new AppError(
    "edge_superseded",
    `Edge ${caller.edgeId}: incarnation ${caller.incarnation} is no longer its newest (another process took its id); its leases are closed.`,
  );
}
