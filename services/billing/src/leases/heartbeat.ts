import type { HeartbeatRequest, HeartbeatResponse, LeaseReport, LeaseState } from "@mkt/proto/billing/v1/leases";
import { billingDb, type LeaseWhere } from "../billing-db.ts";
import type { BillingContext, Em } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import { extendLiveSession, fenceLapsed, renewSession } from "./edge-session.ts";
import { holdIncarnation, incarnationOf, type EdgeCaller } from "./edge-incarnation.ts";
import { growLease, readSizing } from "./lease-growth.ts";
import { batchWrites } from "../write-batch.ts";
import { windowsOf } from "./lease-windows.ts";
import { nextWindowAheadMs } from "@mkt/runtime/next-window";
import { shrinkIdleCredit } from "./idle-credit.ts";
import { leaseState, unknownLease } from "./lease-state.ts";
import { leaseSettings } from "./lease-settings.ts";
import { closeReported } from "./lease-closing.ts";
import { applyReport } from "./lease-reports.ts";
import type { LeaseRow } from "./lease-rows.ts";
import { loadLeases, lockWallets, lockWalletsOf } from "./lease-store.ts";
import { amountsOf, budgetAmountsOf, validateEdgeCall, validateReports } from "./lease-validation.ts";
import { growBudget, returnIdleSlots } from "./budget-growth.ts";
import { budgetSubscriptions, fenceBudget, lockSubscriptions } from "./lease-budgets.ts";
import { isUuid } from "@mkt/runtime/ids";

const NOTHING = { credit: 0n, requests: 0n };

/**
 * Extends the open lease's budgets: one whose subscription is no longer active (a path that did
 * not fence it) is fenced now; the others give back idle slots and grow with their demand.
 */
async function growBudgets(
  ctx: BillingContext,
  em: Em,
  lease: LeaseRow,
  subscriptions: Map<string, Record<string, unknown>>,
  report: LeaseReport,
  now: Date,
): Promise<void> {
  for (const budget of lease.budgets) {
    const subscription = subscriptions.get(budget.subscriptionId);
    if (budget.status !== "open" || !subscription) {
      // A fenced budget (a recall its edge has not acked yet) still gives back idle slots.
      await returnIdleSlots(em, lease, budget.subscriptionId);
      continue;
    }
    if (subscription.status !== "active") {
      await fenceBudget(em, lease, budget, subscription.status as string, now);
      continue;
    }
    const demand = report.budgetDemand.find((d) => d.subscriptionId === budget.subscriptionId);
    await growBudget(
      ctx,
      em,
      lease,
      subscription,
      {
        inHand: { requests: 0n, tokens: 0n },
        demandPerSecond: budgetAmountsOf(demand),
        returnIdleSlots: true,
        nextWindowAheadMs: aheadFor(ctx, report),
      },
      now,
    );
  }
}

/**
 * Accounts whose leases one transaction of a heartbeat applies (their wallets stay locked until it
 * commits). Each transaction costs a fixed handful of statements (the answered leases, the sizing,
 * the writes), so larger ones cost less per lease, but a grant on one of their accounts waits for
 * the whole transaction. With 200 leases reported per beat, 32 took about a quarter less CPU per
 * lease in billing and a third less in PostgreSQL than 16, and grants on those accounts waited
 * about as long; 64 saved a little more CPU, but the grants' median wait rose by half and their
 * p99 doubled (bench/README.md#heartbeats--npx-node-benchheartbeatsts).
 */
const ACCOUNTS_PER_TRANSACTION = 32;
/** Transactions of one heartbeat run at once (of the billing pool's connections, which grants share). */
const PARALLEL_TRANSACTIONS = 3;

/**
 * One edge's heartbeat (docs/leases.md#idle-leases): renews its session, which extends every open
 * lease of the edge; applies each reported lease's cumulative totals (unless billing has passed
 * their sequence); closes those reported final; shrinks idle ones' credit; grows open ones whose
 * demand needs it; and answers the leases it reported plus those with news (answeredLeases). Every
 * other open lease (an idle one, most of them with many accounts) costs nothing here but the
 * session row: the edge extends it by the reply's valid_for_ms. A session that had lapsed is fenced
 * first: the edge stopped admitting on it by its own clock, so nothing revives it; that heartbeat
 * answers every lease of the edge.
 *
 * A live session is extended first (extendLiveSession); the leases are then applied in
 * transactions of ACCOUNTS_PER_TRANSACTION accounts each. One transaction for all of them held
 * every wallet of the edge locked for its whole length (1.5 s for 200 accounts), so every grant
 * on those accounts waited for it, and the heartbeat itself outlived the edge's timeout. Each
 * account's leases are still applied under its wallet lock, after its subscriptions' (the order
 * every lease transaction takes), so a fence commits wholly before or after them. A lapsed or new
 * session takes the one transaction over all of the edge's leases that fences what lapsed.
 */
export async function heartbeat(ctx: BillingContext, req: HeartbeatRequest): Promise<HeartbeatResponse> {
  validateEdgeCall(req);
  validateReports(req.leases);
  const ttlMs = ctx.config.LEASE_TTL_MS;
  const reports = new Map<string, LeaseReport>(req.leases.filter((r) => isUuid(r.leaseId)).map((r) => [r.leaseId, r]));
  const unanswered = unansweredAccounts(req);
  const caller = { edgeId: req.edgeId, incarnation: await incarnationOf(ctx, req), bootId: req.bootId };
  const renewed = await extendLiveSession(ctx.orm.em.fork(), caller, req.sequence, ctx.clock(), ttlMs);
  let states: LeaseState[];
  if (!renewed) {
    states = await withDeadlockRetry(() =>
      ctx.orm.em.fork().transactional((em) => heartbeatIn(ctx, em, req, caller, reports, undefined)),
    );
  } else {
    const accounts = await accountsOf(ctx.orm.em.fork(), req.edgeId, reports, { now: ctx.clock(), ttlMs, unanswered });
    const chunks: string[][] = [];
    for (let i = 0; i < accounts.length; i += ACCOUNTS_PER_TRANSACTION) {
      chunks.push(accounts.slice(i, i + ACCOUNTS_PER_TRANSACTION));
    }
    const results: LeaseState[][] = new Array(chunks.length);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < chunks.length; i = next++) {
        const chunk = chunks[i]!;
        results[i] = await withDeadlockRetry(() =>
          ctx.orm.em.fork().transactional((em) => heartbeatIn(ctx, em, req, caller, reports, chunk)),
        );
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_TRANSACTIONS, chunks.length) }, worker));
    states = results.flat();
  }
  const known = new Set(states.map((l) => l.leaseId));
  return {
    leases: [...states, ...req.leases.filter((r) => !known.has(r.leaseId)).map((r) => unknownLease(r.leaseId))],
    validForMs: BigInt(ttlMs),
    incarnation: caller.incarnation,
    settings: leaseSettings(ctx.config),
  };
}

/**
 * The leases of the edge a heartbeat answers, as a condition on `l`: with `live` (the session was
 * live), those it reported and those with news the edge must get though it reported nothing:
 * fenced ones, open ones with a fenced budget, open ones on an account whose grant the edge got no
 * answer to and, within nextWindowAheadMs of a minute's end (a day ends with a minute), open ones
 * holding room of a window not started yet.
 * Without it (a lapsed or new session), every lease not closed and those reported.
 */
function answeredLeases(
  edgeId: string,
  reports: Map<string, LeaseReport>,
  live?: { now: Date; ttlMs: number; unanswered: string[] },
): LeaseWhere {
  const ids = [...reports.keys()];
  // Each list is one bound array, so the statement's text is the same whatever their lengths.
  const nextWindow = live && windowsOf(MINUTE, live.now, nextWindowAheadMs(live.ttlMs)).next;
  return (l) => {
    const reported = l("l.id", "=", l.fn.any(l.val(ids)));
    if (!live) return l.and([l("l.edge_id", "=", edgeId), l.or([l("l.status", "<>", "closed"), reported])]);
    const news = [
      l.exists(
        l
          .selectFrom("lease_budgets as b")
          .select("b.lease_id")
          .whereRef("b.lease_id", "=", "l.id")
          .where("b.status", "=", "fenced"),
      ),
    ];
    if (nextWindow) {
      news.push(
        l.exists(
          l
            .selectFrom("lease_allowances as a")
            .select("a.id")
            .whereRef("a.lease_id", "=", "l.id")
            .where("a.window_start", ">", live.now.toISOString())
            .where("a.resource", "in", ["requests_minute", "requests_day", "sub_requests_minute", "sub_tokens_minute"]),
        ),
      );
    }
    if (live.unanswered.length > 0) news.push(l("l.account_id", "=", l.fn.any(l.val(live.unanswered))));
    return l.and([
      l("l.edge_id", "=", edgeId),
      l.or([reported, l("l.status", "=", "fenced"), l.and([l("l.status", "=", "open"), l.or(news)])]),
    ]);
  };
}

const MINUTE = { lengthMs: 60_000 };

/** A report sent ahead for the next window's room gets it from nextWindowAheadMs before the end. */
const aheadFor = (ctx: BillingContext, report: LeaseReport) =>
  report.nextWindow ? nextWindowAheadMs(ctx.config.LEASE_TTL_MS) : undefined;

/** The accounts of grants the edge got no answer to (ids that are not UUIDs name no lease). */
const unansweredAccounts = (req: HeartbeatRequest) => [...new Set(req.unansweredGrantAccounts.filter(isUuid))];

/** Accounts of the leases a live session's heartbeat answers (ascending), to share out among transactions. */
async function accountsOf(
  em: Em,
  edgeId: string,
  reports: Map<string, LeaseReport>,
  live: { now: Date; ttlMs: number; unanswered: string[] },
): Promise<string[]> {
  const db = await billingDb(em);
  const rows = await db
    .selectFrom("leases as l")
    .select("l.account_id")
    .distinct()
    .where(answeredLeases(edgeId, reports, live))
    .orderBy("l.account_id")
    .execute();
  return rows.map((row) => row.account_id);
}

/**
 * Applies the heartbeat to the leases of `only` (accounts, the session already extended), or,
 * with `only` undefined, renews the session and applies it to every lease of the edge, fencing
 * them first when the session had lapsed. Returns the state of each lease it read.
 */
async function heartbeatIn(
  ctx: BillingContext,
  transaction: Em,
  req: HeartbeatRequest,
  caller: EdgeCaller,
  reports: Map<string, LeaseReport>,
  only: string[] | undefined,
): Promise<LeaseState[]> {
  // Each applied lease makes a few small writes: they go together, in a round trip or two.
  const { em, flush } = batchWrites(transaction);
  const now = ctx.clock();
  const ttlMs = ctx.config.LEASE_TTL_MS;
  // Subscriptions first (FOR SHARE), then wallets: a cancel, pause or past due that updates one
  // commits wholly before this heartbeat reads its budget (fenced) or wholly after (and fences).
  const subscriptions = await lockSubscriptions(em, await budgetSubscriptions(em, req.edgeId, only));
  // The incarnation before the session row (renewSession locks it): starting an incarnation
  // takes the two in that order too.
  await holdIncarnation(em, caller);
  const lapsed = only ? undefined : await renewSession(em, req.edgeId, req.sequence, now, ttlMs);
  // Without `only`, the accounts are those of the leases answered, found as their wallets are locked.
  const wallets = only ? await lockWallets(em, only) : await lockWalletsOf(em, answeredLeases(req.edgeId, reports));
  if (lapsed) await fenceLapsed(em, req.edgeId, lapsed);
  const answered = only
    ? answeredLeases(req.edgeId, reports, { now, ttlMs, unanswered: unansweredAccounts(req) })
    : answeredLeases(req.edgeId, reports);
  const leases = await loadLeases(em, (l) =>
    only ? l.and([answered(l), l("l.account_id", "=", l.fn.any(l.val(only)))]) : answered(l),
  );
  const growing = leases.filter((l) => l.status === "open" && reports.has(l.id)).map((l) => l.accountId);
  const sizing = await readSizing(em, req.edgeId, [...new Set(growing)], now, ttlMs);
  for (const lease of leases) {
    const report = reports.get(lease.id);
    if (!report) continue;
    const wallet = wallets.get(lease.accountId)!;
    const applied = await applyReport(em, lease, report, req.sequence, now);
    if (applied && report.final) await closeReported(em, lease, wallet, now, ctx.config.MAX_REQUEST_MS);
    else if (applied && lease.status === "open") {
      if (report.keepSpareCreditMicros !== undefined) {
        await shrinkIdleCredit(em, lease, wallet, report.keepSpareCreditMicros);
      }
      await growLease(
        ctx,
        em,
        lease,
        wallet,
        {
          inHand: NOTHING,
          demandPerSecond: amountsOf(report.demandPerSecond),
          nextWindowAheadMs: aheadFor(ctx, report),
          sizing: sizing.get(lease.accountId),
        },
        now,
      );
      await growBudgets(ctx, em, lease, subscriptions, report, now);
    }
  }
  await flush();
  return leases.map((lease) => leaseState(lease, now, ctx.config));
}
