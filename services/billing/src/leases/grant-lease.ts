import { AppError } from "@mkt/runtime/errors";
import { isUuid, newId } from "@mkt/runtime/ids";
import type { GrantLeaseRequest, GrantLeaseResponse } from "@mkt/proto/billing/v1/leases";
import type { BillingConfig } from "../config.ts";
import type { BillingContext, Em } from "../context.ts";
import { withDeadlockRetry } from "./deadlock-retry.ts";
import { grantWaitingForSettlement } from "./settling-holds.ts";
import { batchWrites, write } from "../write-batch.ts";
import { openWallet } from "../wallets/ledger.ts";
import { extendLiveSession, fenceLapsed, openLeaseAccounts, renewSession } from "./edge-session.ts";
import { holdIncarnation, incarnationOf, type EdgeCaller } from "./edge-incarnation.ts";
import { growLease } from "./lease-growth.ts";
import { leaseState } from "./lease-state.ts";
import { leaseSettings } from "./lease-settings.ts";
import { closeReported } from "./lease-closing.ts";
import { applyReport } from "./lease-reports.ts";
import type { LeaseRow } from "./lease-rows.ts";
import { accountKeyLimits, loadLeases, lockWallets } from "./lease-store.ts";
import { growKeyRoom } from "./key-room.ts";
import { amountsOf, budgetAmountsOf, validateEdgeCall, validateNeed, validateReports } from "./lease-validation.ts";
import { refuseUnlessActive } from "../subscriptions/subscription-gate.ts";
import { openPlanSubscription } from "../subscriptions/implicit-subscription.ts";
import { growBudget } from "./budget-growth.ts";
import { recallForGrant } from "./grant-recall.ts";
import { recallBudgetsForGrant } from "./budget-recall.ts";
import { lockSubscriptions, openBudget } from "./lease-budgets.ts";

/**
 * The cold or short path (docs/architecture.md#admission-on-a-lease): opens the edge's lease on the
 * account, or grows its open one, so that it covers at least the request in hand, in one
 * transaction. A refusal (insufficient_credits, rate_limit_exceeded) rolls everything back. A
 * fenced lease is never reopened: a new one is made beside it. A request on a subscription's key
 * also opens (or, once the subscription is active again, reopens) that subscription's budget in the
 * lease and grows it to cover the request, or refuses it (paused 403, past due 402, cancelled 401,
 * plan rpm/tpm 429, included tokens, max_concurrent).
 */
export async function grantLease(
  ctx: BillingContext,
  req: GrantLeaseRequest,
  abandoned: () => boolean = () => false,
): Promise<GrantLeaseResponse> {
  try {
    const granted = await grantOrRefuse(ctx, req, abandoned);
    ctx.metrics.leaseGrants.inc({ result: "granted" });
    return granted;
  } catch (err) {
    const refused = err instanceof AppError && err.httpStatus < 500;
    ctx.metrics.leaseGrants.inc({ result: refused ? "refused" : "failed" });
    throw err;
  }
}

async function grantOrRefuse(
  ctx: BillingContext,
  req: GrantLeaseRequest,
  abandoned: () => boolean,
): Promise<GrantLeaseResponse> {
  // The lease's validity counts from here: the edge counts it from its send, which came before.
  const receivedAt = ctx.clock();
  validateEdgeCall(req);
  if (!isUuid(req.accountId)) {
    throw new AppError("invalid_request", "account_id must be a UUID", { param: "account_id" });
  }
  validateNeed(req.request, "request");
  validateNeed(req.demandPerSecond, "demand_per_second");
  if (req.minCreditMicros < 0n || req.minCreditMicros > (req.request?.creditMicros ?? 0n)) {
    throw new AppError("invalid_request", "min_credit_micros must be from 0 to request.credit_micros", {
      param: "min_credit_micros",
    });
  }
  if (req.report) validateReports([req.report]);
  // An account key's request to an open endpoint: admitted on the account's subscription to the
  // plan, made by this grant when it is the first.
  const openProductId = req.request?.openProductId ?? "";
  if (openProductId && !req.request!.subscriptionId) {
    const subscriptionId = await openPlanSubscription(ctx, req.accountId, openProductId);
    req = { ...req, request: { ...req.request!, subscriptionId } };
  }
  if (!ctx.openWallets.has(req.accountId)) {
    await ctx.orm.em.fork().transactional((em) => openWallet(em, req.accountId, ctx.config.STARTING_CREDIT_USD));
    ctx.openWallets.add(req.accountId);
  }
  const caller = { edgeId: req.edgeId, incarnation: await incarnationOf(ctx, req), bootId: req.bootId };
  // A grant short only by the account's requests not yet settled waits for their batch (at most
  // about one SETTLE_BATCH_WINDOW_MS) before it refuses; it holds no grant slot meanwhile.
  const grant = () =>
    grantWaitingForSettlement(ctx, req.accountId, () =>
      ctx.grantSlot(() =>
        withDeadlockRetry(async () => {
          const ttlMs = ctx.config.LEASE_TTL_MS;
          const deadline = await extendLiveSession(
            ctx.orm.em.fork(),
            caller,
            req.sequence,
            ctx.clock(),
            ttlMs,
            ttlMs / 2,
          );
          return ctx.orm.em
            .fork()
            .transactional((em) => grantIn(ctx, em, req, caller, { receivedAt, sessionDeadline: deadline, abandoned }));
        }),
      ),
    );
  try {
    return await grant();
  } catch (err) {
    // Before a 402/429, other edges' unreported room is recalled if it could cover the request
    // (docs/leases.md#how-much-room-an-edge-gets); the grant is then tried once more with whatever
    // came back. The account's own credit and request windows, and a spend-limited key's room; a
    // scoped key's plan limits (slots, the plan's minute, included tokens) may sit in other edges'
    // budgets.
    if (!(err instanceof AppError)) throw err;
    const accountRoom = ["insufficient_credits", "rate_limit_exceeded", "key_limit_exceeded"].includes(err.code);
    const recalled =
      (accountRoom && (await recallForGrant(ctx, req, err.code))) || (await recallBudgetsForGrant(ctx, req, err.code));
    if (!recalled) throw err;
    return grant();
  }
}

async function grantIn(
  ctx: BillingContext,
  transaction: Em,
  req: GrantLeaseRequest,
  caller: EdgeCaller,
  session: {
    /** When billing received the call. */
    receivedAt: Date;
    /** The deadline of the session found live just before (extendLiveSession), or undefined. */
    sessionDeadline: Date | undefined;
    /** Whether the edge stopped waiting for the answer (its deadline passed, or it cancelled). */
    abandoned: () => boolean;
  },
): Promise<GrantLeaseResponse> {
  // The lease's writes (its row, each room and counter, the hold) go together before each read.
  const { em, flush } = batchWrites(transaction);
  const now = ctx.clock();
  const subscriptionId = req.request?.subscriptionId ?? "";
  // The subscription before any wallet (the order its cancel, pause and renewal lock in); its
  // state is checked under that lock, so a budget is never opened for one already fenced.
  const subscriptions = await lockSubscriptions(em, subscriptionId ? [subscriptionId] : []);
  const subscription = subscriptions.get(subscriptionId);
  if (subscriptionId && subscription?.account_id !== req.accountId) refuseUnlessActive(undefined);
  if (subscription) refuseUnlessActive(subscription.status as string);
  const ttlMs = ctx.config.LEASE_TTL_MS;
  const { receivedAt, sessionDeadline } = session;
  // The incarnation before the session row (renewSession locks it), the order starting one takes.
  await holdIncarnation(em, caller);
  const lapsed = sessionDeadline ? undefined : await renewSession(em, req.edgeId, req.sequence, now, ttlMs);
  const accounts = [req.accountId, ...(lapsed ? await openLeaseAccounts(em, req.edgeId) : [])];
  const wallets = await lockWallets(em, accounts);
  if (lapsed) await fenceLapsed(em, req.edgeId, lapsed);
  const wallet = wallets.get(req.accountId)!;
  const leases = await loadLeases(em, (l) =>
    l.and([l("l.edge_id", "=", req.edgeId), l("l.account_id", "=", req.accountId), l("l.status", "<>", "closed")]),
  );
  const reported = req.report ? leases.find((l) => l.id === req.report!.leaseId) : undefined;
  const applied = reported !== undefined && (await applyReport(em, reported, req.report!, req.sequence, now));
  if (applied && req.report!.final) {
    await closeReported(em, reported, wallet, now, ctx.config.MAX_REQUEST_MS);
  } else if (applied && reported.status === "fenced" && req.report!.slotsPinned) {
    // The edge reports the lease past its validity (its slots pinned to this report) and the lease
    // is fenced (here, when its session lapsed: billing unreachable or restarted, say). No reply
    // revives a fenced lease, so the edge admits nothing more on it: these totals are its last,
    // and it closes on them as on a final report. What it did not use goes back before this grant
    // sizes the next lease (the slots beyond its requests in flight, this minute's request and
    // plan room); kept until the edge's final report a heartbeat later, that room was counted as
    // used and this grant refused 429 for room nobody used.
    await closeReported(em, reported, wallet, now, ctx.config.MAX_REQUEST_MS);
  }
  let lease = leases.find((l) => l.status === "open");
  if (lease && lease !== reported) {
    // No totals with the call: the grant still answers this sequence.
    await applyReport(
      em,
      lease,
      { leaseId: lease.id, admitted: [], final: false, budgetDemand: [], slotsPinned: false, nextWindow: false },
      req.sequence,
      now,
    );
  }
  lease ??= await openLease(em, req, now, ctx.config);
  const inHand = { ...amountsOf(req.request), minCredit: req.minCreditMicros };
  const demandPerSecond = amountsOf(req.demandPerSecond);
  // A spend-limited key's room first: it may shrink a request without max_tokens to what the key
  // has left, and the account's credit then covers that (or less).
  const key = lease.keyLimits.find((k) => k.keyId === req.request?.keyId);
  if (key && inHand.credit > 0n) {
    const need = { credit: inHand.credit, minCredit: inHand.minCredit, demandPerSecond: demandPerSecond.credit };
    inHand.credit = await growKeyRoom(ctx, em, lease, key, wallet, need, now);
  }
  await growLease(ctx, em, lease, wallet, { inHand, demandPerSecond }, now);
  let includedCrossing = false;
  if (subscription) {
    await openBudget(em, lease, subscription);
    const demand = req.demandPerSecond?.subscriptionId === subscriptionId ? req.demandPerSecond : undefined;
    ({ includedCrossing } = await growBudget(
      ctx,
      em,
      lease,
      subscription,
      { inHand: budgetAmountsOf(req.request), demandPerSecond: budgetAmountsOf(demand), returnIdleSlots: false },
      now,
    ));
  }
  await flush();
  // An edge that stopped waiting never learns of this lease: it would hold credit and slots for
  // as long as the edge's session lives. Rolled back instead, the last thing before the commit;
  // the edge names the account in its heartbeats until a grant it gave up on can no longer have
  // committed (edge/src/leases/lease-calls.ts), which covers one that committed just before.
  if (session.abandoned()) {
    throw new AppError("service_unavailable", "The edge stopped waiting for this grant; nothing was granted.");
  }
  // Valid until the deadline of the session billing holds the lease by (renewSession's: now + TTL),
  // counted from the call's arrival: the edge counts it from its send, earlier still, so a grant
  // that waited here (behind others, for a lock) does not reach the edge valid for less.
  const deadline = sessionDeadline ?? new Date(now.getTime() + ttlMs);
  const validForMs = deadline.getTime() - receivedAt.getTime();
  return {
    lease: leaseState(lease, now, ctx.config, validForMs),
    includedCrossing,
    incarnation: caller.incarnation,
    settings: leaseSettings(ctx.config),
  };
}

/**
 * A new lease, with the bounds it is granted under (this reply's settings): billing closes it by
 * those even after a restart with other settings, since its edge may be using them.
 */
async function openLease(
  em: Em,
  req: GrantLeaseRequest,
  now: Date,
  config: Pick<BillingConfig, "EDGE_ISOLATION_MS" | "MAX_REQUEST_MS">,
): Promise<LeaseRow> {
  const lease: LeaseRow = {
    id: newId(),
    edgeId: req.edgeId,
    accountId: req.accountId,
    tier: req.tier,
    status: "open",
    appliedSequence: req.sequence,
    heldMicros: 0n,
    settledMicros: 0n,
    releasedAt: null,
    deadline: null,
    isolationMs: config.EDGE_ISOLATION_MS,
    maxRequestMs: config.MAX_REQUEST_MS,
    allowances: [],
    budgets: [],
    // A read: it also sends the writes held so far, among them the close of a lease this call's
    // report ended (a row write, applied after statements), before the insert below that takes
    // its place as the pair's one open lease.
    keyLimits: await accountKeyLimits(em, req.accountId),
  };
  await write(
    em,
    `insert into leases (id, edge_id, account_id, tier, status, applied_sequence, last_used_at, created_at,
       isolation_ms, max_request_ms)
     values (?, ?, ?, ?, 'open', ?, ?, ?, ?, ?)`,
    [
      lease.id,
      lease.edgeId,
      lease.accountId,
      lease.tier,
      lease.appliedSequence,
      now,
      now,
      lease.isolationMs,
      lease.maxRequestMs,
    ],
  );
  return lease;
}
