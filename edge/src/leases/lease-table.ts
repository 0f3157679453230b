import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { PromiseClient } from "@mkt/runtime/grpc-client";
import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";
import { LeaseStatus, type LeaseNeed, type LeaseReport, type LeaseState } from "@mkt/proto/billing/v1/leases";
import type { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { HeldLease } from "./held-lease.ts";
import {
  keyBudgetOf,
  takePlanRoom,
  takeRequest,
  takeWorstCaseFromLease,
  type Attempt,
  type Ticket,
} from "./lease-admission.ts";
import { nextBackoffMs } from "./heartbeat-backoff.ts";
import type { IsolationWatch } from "./isolation-watch.ts";
import { nextWindowAheadMs } from "@mkt/runtime/next-window";
import type { Histogram } from "prom-client";

export type LeaseBilling = Pick<PromiseClient<BillingServiceClient>, "grantLease" | "heartbeat" | "returnLeases">;

export interface LeaseTableOptions {
  billing: LeaseBilling;
  /** Billing's LEASE_TTL_MS (the edge's config must match it). */
  ttlMs: number;
  /** LEASE_IDLE_MS: a lease with nothing admitted or in flight this long is returned. */
  idleMs?: number;
  log: Logger;
  /** The edge's stable id (EDGE_ID), shared with its principal cache. */
  edgeId: string;
  /** Told of every lease call billing answers: the edge's bound on running cut off from billing. */
  isolation?: IsolationWatch;
  /** The edge's monotonic clock in ms (performance.now by default; tests may move it). */
  now?: () => number;
  /** Leases one heartbeat reports at most (MAX_REPORTS_PER_BEAT; tests make it small). */
  maxReportsPerBeat?: number;
}

/** What the request in hand is, for the account's lease. */
export interface AdmitNeed {
  accountId: string;
  tier: string;
  /** The subscription of a scoped key ('' for an account key). */
  subscriptionId?: string;
  /**
   * An account key's request to an open endpoint: the plan whose budget (of the account's
   * subscription to it, made by billing on first use) admits it.
   */
  openProductId?: string;
  /** The API key the request is made with: a spend-limited key's room is taken too ('' for none). */
  keyId?: string;
  /**
   * What the worst case is known to be at least before the prompt is counted (the output cap × n
   * at the route's price, and those tokens): a cold request asks for it in the same GrantLease,
   * so it makes one round trip, not a second one for its worst case.
   */
  atLeast?: { credit: bigint; tokens: bigint };
  /**
   * The credit its worst case is likely to take (a request without max_tokens: at the model's
   * output cap), for a cold grant's sizing only: the grant lends that much ahead when the account
   * has it, so step two is admitted from memory, but covers no more than `atLeast` (an account
   * that cannot pay the model's cap is served a smaller one, against the whole account).
   */
  likelyCredit?: bigint;
}

/** Which of the account's allowances a grant is for: its own, a subscription's, or an open plan's. */
interface GrantScope {
  subscriptionId: string;
  keyId: string;
  openProductId?: string;
}

/** The key of one scope's grants and refusals: one key's, plan's or subscription's never holds up another's. */
const scopeKey = (accountId: string, on: GrantScope) =>
  `${accountId}/${on.subscriptionId || (on.openProductId ? `open:${on.openProductId}` : "")}/${on.keyId}`;

/** A request's worst case: credit (micro-USD), tokens, and the output cap per choice it means. */
export interface WorstCase {
  credit: bigint;
  tokens: bigint;
  maxOutputTokens: bigint;
}

/**
 * A worst case that depends on the lease it is taken on: an overage plan's credit is the part of
 * its tokens the budget's included room does not cover.
 */
export type WorstCaseOn = (lease: HeldLease) => WorstCase;

/** How a request without max_tokens fits what the account has (see takeWorstCase). */
export interface FitToCredit {
  /** The least credit it can be served with (the prompt and one output token per choice). */
  min: bigint;
  /** The worst case that `spareCredit` pays for, or undefined when it pays for none. */
  shrink(spareCredit: bigint): WorstCase | undefined;
}

/** What the request in hand asks of a grant (GrantLease's request and min_credit_micros). */
interface InHand {
  requests: bigint;
  credit: bigint;
  tokens: bigint;
  minCredit: bigint;
  /** AdmitNeed.likelyCredit: demand for sizing, not cover (0 when not known). */
  likelyCredit: bigint;
}

/**
 * One GrantLease of an account (per key) and the requests it is for: while `joinable`, requests
 * of the key running short add what they need to `inHand`, so a cold burst makes one grant sized
 * for all of them (the `w` of the sizing rule is their sum) instead of one each.
 */
interface GrantBatch {
  inHand: InHand;
  members: number;
  joinable: boolean;
  done: Promise<{ includedCrossing: boolean }>;
}

/**
 * LEASE_IDLE_MS's default: an account that sends a request now and then (every few seconds up to
 * a minute) keeps its lease, extended by the heartbeat at no cost to billing, so its requests are
 * admitted in memory instead of each waiting on a GrantLease.
 */
export const DEFAULT_LEASE_IDLE_MS = 60_000;

/**
 * Idle leases whose credit one heartbeat gives back, at most: the room they hold is no one's use
 * and goes back a beat later just as well, while one heartbeat carrying every lease that went
 * idle together (after a burst on many accounts) can take longer than its timeout to answer.
 */
const MAX_IDLE_SHRINKS_PER_BEAT = 32;

/**
 * Leases one heartbeat reports, at most. Billing answers a heartbeat within its timeout (TTL / 2)
 * only if it is not too large: one that failed leaves every lease it carried unanswered, and if
 * the next carried them all again, with what changed meanwhile, it would fail as well, while the
 * leases lapse and every request waits on a grant (measured: 1,000 sparse accounts on a busy
 * 2-core machine). Leases over the cap are reported in the next beats, the most urgent first.
 */
const MAX_REPORTS_PER_BEAT = 256;

/** Which leases a heartbeat reports first: those only a reply can renew or close, then changes. */
const REPORT_URGENCY: Record<string, number> = {
  final: 0,
  lapsed: 0,
  changed: 1,
  unanswered: 1,
  "next window": 2,
  slots: 2,
  "idle credit": 3,
};

/** How long a cold request waits for its GrantLease before it is answered 503. */
const GRANT_TIMEOUT_MS = 10_000;

/**
 * Retries of the cold path for one request before it gives up with a 503: others took each
 * grant's room, or the grant came back after the lease's validity (a slow billing).
 */
const MAX_GRANTS_PER_REQUEST = 8;

/** How long a closed lease's id is remembered: past any grant reply sent before it closed. */
const FORGET_CLOSED_MS = 2 * GRANT_TIMEOUT_MS;

/**
 * The edge's admission leases (docs/leases.md), one table per edge process with its own edge id.
 * Admission is in memory; billing is called only on the cold or short path (one GrantLease that
 * concurrent requests of the account share), by the heartbeat (`beat`, every TTL / 2 from
 * `start`), on a recall's ack and on `returnAll`. Every call carries the edge's next sequence.
 */
export class LeaseTable {
  readonly edgeId: string;
  /** This process's own: billing tells its calls from those of an earlier process under the same id. */
  readonly bootId = randomUUID();
  readonly ttlMs: number;
  /** Validity is cut this much short of billing's, for the time a reply spent on the way. */
  readonly marginMs: number;
  readonly #billing: LeaseBilling;
  readonly #log: Logger;
  readonly #now: () => number;
  #sequence = 0n;
  /** The lease each account admits on. */
  readonly #leases = new Map<string, HeldLease>();
  /** Leases the edge stopped using, reported final in every heartbeat until billing says closed. */
  readonly #retired = new Map<string, HeldLease>();
  /**
   * Leases billing said closed, on the edge's clock: a grant reply sent before the close may still
   * arrive (within a grant's timeout) and must not bring one back. Forgotten after FORGET_CLOSED_MS.
   */
  readonly #closed = new Map<string, number>();
  /** One GrantLease in flight per account and key, shared by the requests waiting on it. */
  readonly #granting = new Map<string, GrantBatch>();
  /**
   * 402/429 from billing, refused here until the next heartbeat reply sent after them, and for one
   * TTL at most: a top-up while heartbeats fail (a busy billing) must not leave the account
   * refused on a stale answer; past a TTL its next request asks billing again.
   */
  readonly #refused = new Map<string, { error: AppError; at: number; credit: bigint }>();
  readonly #idleMs: number;
  readonly #maxReportsPerBeat: number;
  /**
   * Accounts whose GrantLease got no answer (timed out, billing unreachable): billing may have
   * opened a lease the edge never heard of. The next heartbeat names them and billing lists their
   * leases, which the edge then gives back (#applyBeat).
   */
  readonly #unansweredGrants = new Set<string>();
  #lastBeatAt: number;
  #beatFailures = 0;
  /** The heartbeat on the way, until its reply is applied (or it failed). */
  #beating: Promise<void> | undefined;
  #grantTimes: Pick<Histogram, "observe"> | undefined;
  #nextBeatAt = -Infinity;
  /** Billing's number for this process under its edge id: 0 until a reply gives it. */
  #incarnation = 0n;
  /** Another process took this edge id: billing closed every lease of this one, which admits no more. */
  #superseded = false;
  readonly #isolation: IsolationWatch | undefined;

  constructor(options: LeaseTableOptions) {
    this.#billing = options.billing;
    this.edgeId = options.edgeId;
    this.#isolation = options.isolation;
    this.ttlMs = options.ttlMs;
    this.marginMs = Math.max(10, Math.floor(options.ttlMs / 10));
    this.#log = options.log;
    this.#now = options.now ?? (() => performance.now());
    this.#idleMs = options.idleMs ?? DEFAULT_LEASE_IDLE_MS;
    this.#maxReportsPerBeat = options.maxReportsPerBeat ?? MAX_REPORTS_PER_BEAT;
    this.#lastBeatAt = this.#now();
  }

  /** Times each GrantLease from now on (the edge's `mkt_lease_grant_seconds`). */
  observeGrants(histogram: Pick<Histogram, "observe">): void {
    this.#grantTimes = histogram;
  }

  /** The edge's next sequence number, increasing across all of its lease calls. */
  nextSequence(): bigint {
    this.#sequence += 1n;
    return this.#sequence;
  }

  /** Whether another process took this edge's id (readiness fails; nothing is admitted). */
  get superseded(): boolean {
    return this.#superseded;
  }

  /** Requests admitted here and still running. */
  inFlight(): number {
    let n = 0;
    for (const lease of [...this.#leases.values(), ...this.#retired.values()]) n += lease.inFlight;
    return n;
  }

  /** Who this process is, in every lease call. */
  #caller() {
    return { edgeId: this.edgeId, incarnation: this.#incarnation, bootId: this.bootId };
  }

  /** Billing answered a call sent at `sentAt`, in this incarnation. */
  #answered(incarnation: bigint, sentAt: number): void {
    if (this.#incarnation === 0n) this.#incarnation = incarnation;
    this.#isolation?.contact(sentAt);
  }

  /**
   * Billing refused this process: another one started under its edge id and took the next
   * incarnation, closing every lease of this one. Admitting on them would be admitting on room
   * billing released, so the process stops: no lease, no admission, its answers in flight end,
   * readiness fails. Two live processes with one EDGE_ID are a misconfiguration; taking the id
   * back would make them close each other's leases over and over.
   */
  #supersede(err: AppError): AppError {
    if (!this.#superseded) {
      this.#superseded = true;
      this.#leases.clear();
      this.#retired.clear();
      this.#log.error(
        { edgeId: this.edgeId, incarnation: this.#incarnation },
        "another process took this EDGE_ID: this one admits nothing more (give every edge its own EDGE_ID)",
      );
      this.#isolation?.end(superseded());
    }
    return superseded(err);
  }

  /** The lease the account admits on (tests and metrics). */
  leaseOf(accountId: string): HeldLease | undefined {
    return this.#leases.get(accountId);
  }

  /**
   * Step one of admission: takes one request (and, on a subscription, one slot). From memory
   * when the lease can; otherwise through GrantLease.
   */
  async admit(need: AdmitNeed): Promise<Ticket> {
    if (this.#superseded) throw superseded();
    const subscriptionId = need.subscriptionId ?? "";
    const keyId = need.keyId ?? "";
    const inHand = {
      requests: 1n,
      credit: need.atLeast?.credit ?? 0n,
      tokens: need.atLeast?.tokens ?? 0n,
      minCredit: 0n,
      likelyCredit: need.likelyCredit ?? 0n,
    };
    const openProductId = subscriptionId ? undefined : need.openProductId;
    return this.#admitting(need.accountId, need.tier, { subscriptionId, keyId, openProductId }, inHand, () => {
      const lease = this.#leases.get(need.accountId);
      if (!lease) return { short: true };
      if (!openProductId) return takeRequest(lease, subscriptionId, this.#now(), keyId);
      const budget = lease.budgetOfPlan(openProductId);
      return budget ? takeRequest(lease, budget.subscriptionId, this.#now(), keyId) : { short: true };
    });
  }

  /**
   * Moves an admitted request to an open endpoint's plan (before its first byte: failover, or a
   * first endpoint the prompt did not fit): one request in that plan's minute, one of its slots and
   * the request's worst-case tokens, from memory or with one grant; the slot of the budget it
   * leaves goes back. Its request in the old plan's minute stays counted (billing's windows only
   * ever grow). Refusals are the new plan's (paused, cancelled, its limits).
   */
  async moveToPlan(ticket: Ticket, productId: string): Promise<void> {
    const { accountId, tier } = ticket.lease;
    const on = { subscriptionId: "", keyId: ticket.keyId, openProductId: productId };
    const inHand = { requests: 1n, credit: 0n, tokens: ticket.worstCaseTokens, minCredit: 0n, likelyCredit: 0n };
    const moved = await this.#admitting(accountId, tier, on, inHand, () => {
      const lease = this.#leases.get(accountId);
      if (lease !== ticket.lease) throw unavailable(this.ttlMs, "The request's lease was recalled");
      const budget = lease.budgetOfPlan(productId);
      if (!budget) return { short: true };
      const taken = takePlanRoom(lease, budget.subscriptionId, ticket.worstCaseTokens, this.#now());
      return "ok" in taken ? { ok: { ...ticket, subscriptionId: budget.subscriptionId, slot: taken.ok } } : taken;
    });
    if (ticket.slot) ticket.slot.admitted -= 1n;
    ticket.slot = moved.slot;
    ticket.subscriptionId = moved.subscriptionId;
  }

  /**
   * Step two, once the prompt is counted: the worst case in credit (micro-USD) and tokens. With
   * `fit` (a request without max_tokens) a smaller worst case is taken when the account cannot
   * pay `want`: the grant then covers what the whole account has left (at least `fit.min`) and
   * `fit.shrink` sizes the request to the lease's spare credit. A ticket whose lease was
   * recalled meanwhile moves to the account's next lease (see below).
   */
  async takeWorstCase(
    ticket: Ticket,
    wanted: WorstCase | WorstCaseOn,
    fit?: FitToCredit,
    restarted = false,
  ): Promise<Ticket> {
    const { accountId, tier } = ticket.lease;
    const { subscriptionId, keyId } = ticket;
    try {
      return await this.#takeWorstCaseOnce(ticket, wanted, fit);
    } catch (err) {
      if (!(err instanceof LeaseGone)) throw err;
      if (restarted) throw unavailable(this.ttlMs, "The request's lease was recalled");
      // A subscription's slot cannot move to another lease: the request starts again there (its
      // first request stays counted in the old lease's final report: one extra in that minute).
      this.release(ticket);
      const fresh = await this.admit({ accountId, tier, subscriptionId, keyId });
      try {
        return await this.takeWorstCase(fresh, wanted, fit, true);
      } catch (freshErr) {
        this.release(fresh);
        throw freshErr;
      }
    }
  }

  async #takeWorstCaseOnce(ticket: Ticket, wanted: WorstCase | WorstCaseOn, fit?: FitToCredit): Promise<Ticket> {
    const { accountId, tier } = ticket.lease;
    const { subscriptionId, keyId } = ticket;
    const worstCaseOn = typeof wanted === "function" ? wanted : () => wanted;
    const first = worstCaseOn(ticket.lease);
    const inHand = {
      requests: 0n,
      credit: first.credit,
      tokens: first.tokens,
      minCredit: fit?.min ?? 0n,
      likelyCredit: 0n,
    };
    let granted = false;
    return this.#admitting(accountId, tier, { subscriptionId, keyId }, inHand, (crossing) => {
      const current = this.#leases.get(accountId);
      if (current !== ticket.lease) {
        // The lease was recalled or lapsed between the two steps. Its final report counted this
        // request; an account key's worst case is credit alone, so it moves to the account's
        // current lease (or a new grant) and settles there. A subscription's slot cannot move.
        if (subscriptionId) throw new LeaseGone();
        if (!current) return { short: true };
      }
      const lease = current;
      const want = worstCaseOn(lease);
      const spare = spareCredit(lease, keyId, this.#now());
      const sized = spare >= want.credit || !fit || !granted ? want : fit.shrink(spare);
      const moved = lease === ticket.lease ? ticket : { ...ticket, lease };
      const attempt = sized
        ? takeWorstCaseFromLease(moved, sized.credit, sized.tokens, this.#now(), { asked: granted, crossing })
        : ({ short: true } as const);
      granted = true;
      if (!("ok" in attempt)) return attempt;
      if (moved !== ticket) {
        ticket.lease.inFlight -= 1;
        lease.inFlight += 1;
        Object.assign(ticket, moved);
      }
      ticket.maxOutputTokens = sized!.maxOutputTokens;
      return { ok: ticket };
    });
  }

  /**
   * Step two from memory only: the worst case is taken when the ticket's lease has the room for
   * it now; otherwise nothing is taken, billing is not asked, and the result is undefined. For a
   * worst case computed on a bound, which the caller would rather make exact than have billing
   * cover the difference.
   */
  takeWorstCaseInMemory(ticket: Ticket, wanted: WorstCase): Ticket | undefined {
    if (this.#leases.get(ticket.lease.accountId) !== ticket.lease) return undefined;
    const now = this.#now();
    const attempt = takeWorstCaseFromLease(ticket, wanted.credit, wanted.tokens, now, {
      asked: false,
      crossing: false,
    });
    if (!("ok" in attempt)) return undefined;
    ticket.maxOutputTokens = wanted.maxOutputTokens;
    return attempt.ok;
  }

  /** The request's registry call ended: its slot goes back to the lease (no call to billing). */
  release(ticket: Ticket): void {
    if (ticket.released) return;
    ticket.released = true;
    ticket.lease.inFlight -= 1;
    if (ticket.slot) ticket.slot.admitted -= 1n;
  }

  async #admitting(
    accountId: string,
    tier: string,
    on: GrantScope,
    inHand: InHand,
    /** `crossing`: this request's own last grant let it cross its included-token line. */
    attempt: (crossing: boolean) => Attempt<Ticket>,
  ): Promise<Ticket> {
    // Per key: one key's spend limit refuses that key, never the account's others.
    const key = scopeKey(accountId, on);
    let crossing = false;
    // A request that may shrink to what the account has (min_credit) asks alone: its grant's
    // cover is computed for it. So does one whose shared grant was refused (below).
    let alone = inHand.minCredit > 0n;
    let waitedForBeat = false;
    for (let grants = 0; ;) {
      const tried = attempt(crossing);
      if ("ok" in tried) return tried.ok;
      if ("waitMs" in tried) {
        await new Promise((resolve) => setTimeout(resolve, tried.waitMs));
        continue;
      }
      // A lease that lapsed while a heartbeat is on the way: that beat's reply renews it (or says
      // it was fenced) at no cost, so the request waits for it, once, rather than ask for a grant.
      // Under load a busy billing answers beats late and leases lapse until the reply; a grant
      // per request in those gaps kept billing busy enough that the gaps never closed.
      const lapsed = this.#leases.get(accountId);
      if (!waitedForBeat && this.#beating && lapsed?.open && this.#now() >= lapsed.validUntil) {
        waitedForBeat = true;
        await this.#beating;
        continue;
      }
      // A refusal cached from billing spares it a call, never room the lease still has.
      const refusal = this.#refused.get(key);
      if (refusal && this.#now() - refusal.at < this.ttlMs && refuses(refusal, inHand)) throw refusal.error;
      if (grants >= MAX_GRANTS_PER_REQUEST) throw unavailable(this.ttlMs, "The account's lease is contended");
      const pending = this.#granting.get(key);
      if (pending && !(pending.joinable && !alone)) {
        // Another request of this account is asking already and cannot take this one's need in:
        // its refusal is its own (a step one refused 429 says nothing of a step two's credit), so
        // the loop looks again, and a refusal that applies to this request is cached by then.
        await pending.done.catch(() => undefined);
        continue;
      }
      grants += 1;
      const batch = pending ?? this.#startGrant(key, accountId, tier, on, inHand, !alone);
      if (pending) {
        pending.members += 1;
        pending.inHand.requests += inHand.requests;
        pending.inHand.credit += inHand.credit;
        pending.inHand.tokens += inHand.tokens;
        pending.inHand.likelyCredit += inHand.likelyCredit;
      }
      let granted;
      try {
        granted = await batch.done;
      } catch (err) {
        // A grant for several requests refused says nothing of each alone (the account may pay
        // some of them): each asks billing again for itself, as a request without a batch does.
        if (batch.members > 1 && err instanceof AppError && isRefusal(err)) {
          alone = true;
          continue;
        }
        throw err;
      }
      // Only the request the grant was made for alone may cross its included-token line: one
      // that shared it (or waited on another's, above) asks for its own when it is short.
      crossing = batch.members === 1 && granted.includedCrossing;
      if (granted.includedCrossing && batch.members > 1) alone = true;
    }
  }

  /**
   * Starts the account's GrantLease for the request in hand. When `joinable`, the call goes out
   * after this turn of the event loop: the other requests of the key that run short meanwhile (a
   * burst on a cold account, all waiting on one authentication) join it instead of each making
   * one; a turn costs microseconds against the grant's round trip.
   */
  #startGrant(
    key: string,
    accountId: string,
    tier: string,
    on: GrantScope,
    inHand: InHand,
    joinable: boolean,
  ): GrantBatch {
    const batch: GrantBatch = {
      inHand: { ...inHand },
      members: 1,
      joinable,
      done: Promise.resolve({ includedCrossing: false }),
    };
    batch.done = (async () => {
      if (joinable) await new Promise((resolve) => setImmediate(resolve));
      batch.joinable = false;
      return this.#grant(accountId, tier, on, batch.inHand, batch.members);
    })().finally(() => {
      if (this.#granting.get(key) === batch) this.#granting.delete(key);
    });
    this.#granting.set(key, batch);
    return batch;
  }

  /**
   * The cold or short path: one GrantLease covering the requests in hand. A
   * refusal is cached for the key only when the grant was for one request: a batch's says
   * nothing of each of its requests alone.
   */
  async #grant(
    accountId: string,
    tier: string,
    on: GrantScope,
    inHand: InHand,
    members = 1,
  ): Promise<{ includedCrossing: boolean }> {
    const { subscriptionId, keyId } = on;
    const key = scopeKey(accountId, on);
    // With no lease in use, a retired one billing may still hold open goes final with the grant:
    // otherwise billing could answer with that lease again, which the edge cannot admit on.
    const held = this.#leases.get(accountId) ?? this.#retiredOf(accountId);
    const sequence = this.nextSequence();
    const sentAt = this.#now();
    // A lease billing fenced, or one the edge retired, goes final with the grant (billing then
    // makes a new one). One merely past its validity (a slow heartbeat) is not: the grant's reply
    // renews it if billing still holds it open, or says it is fenced (the session lapsed).
    // Reporting it final would close it and make a new lease per slow heartbeat, each granted
    // afresh: under load that churn is what kept billing slow.
    const final = held !== undefined && !held.open;
    // A lease past its validity admits nothing until a reply: its slots are pinned to this report
    // (at no cost), so billing may take back the ones lent beyond it when it fences the lease for
    // a lapsed session; otherwise they would keep the subscription's next grant at its limit.
    const pinned = held !== undefined && !final && !held.usable(sentAt);
    if (pinned) held.pin(sequence);
    const report = held && { ...held.report(final, sentAt - this.#lastBeatAt, sequence), slotsPinned: pinned };
    if (held && final) this.#retire(held);
    let state: LeaseState | undefined;
    let includedCrossing: boolean;
    try {
      let incarnation: bigint;
      ({
        lease: state,
        includedCrossing,
        incarnation,
      } = await this.#billing.grantLease(
        {
          ...this.#caller(),
          sequence,
          accountId,
          tier,
          request: {
            creditMicros: inHand.credit,
            requests: inHand.requests,
            tokens: inHand.tokens,
            subscriptionId,
            keyId,
            openProductId: subscriptionId ? "" : (on.openProductId ?? ""),
          },
          demandPerSecond: demandFor(report, inHand, subscriptionId),
          report,
          minCreditMicros: inHand.minCredit,
        },
        // A grant waits on the account's lock behind other grants and a bounded recall: under
        // load that takes longer than one TTL, and a request waiting for it is better served late
        // than refused 503.
        { timeoutMs: Math.max(GRANT_TIMEOUT_MS, this.ttlMs) },
      ));
      this.#answered(incarnation, sentAt);
    } catch (err) {
      this.#grantTimes?.observe((this.#now() - sentAt) / 1000);
      const error = AppError.fromGrpc(err);
      if (error.code === "edge_superseded") throw this.#supersede(error);
      if (isRefusal(error)) {
        if (members === 1) this.#refused.set(key, { error, at: sentAt, credit: creditNeeded(inHand) });
        throw error;
      }
      if (error.httpStatus < 500) throw error;
      this.#unansweredGrants.add(accountId);
      // Billing down or failing: never a 402/429 (docs/adr/0027-dependency-outage-is-503.md).
      throw unavailable(this.ttlMs, "Billing is unavailable", error);
    }
    this.#grantTimes?.observe((this.#now() - sentAt) / 1000);
    if (!state) throw unavailable(this.ttlMs, "Billing sent no lease");
    this.#adopt(state, tier, { sequence, sentAt, receivedAt: this.#now(), marginMs: this.marginMs });
    return { includedCrossing };
  }

  /**
   * Applies a lease state from a grant: the account's lease or its replacement. A lease the edge
   * has retired or seen closed never comes back, even when billing answered the grant before the
   * edge's final report reached it: billing closes the lease on that report and holds only the
   * worst cases it counts, so nothing admitted after it would be held: it would settle at cost 0.
   * The caller's admission then finds no lease and asks again, with the final report.
   */
  #adopt(state: LeaseState, tier: string, at: Parameters<HeldLease["apply"]>[1]): void {
    const current = this.#leases.get(state.accountId);
    if (current?.leaseId === state.leaseId) {
      current.apply(state, at);
      return;
    }
    const retired = this.#retired.get(state.leaseId);
    if (retired || this.#closed.has(state.leaseId)) {
      retired?.apply(state, at);
      return;
    }
    const lease = new HeldLease(state, tier, at.receivedAt);
    lease.apply(state, at);
    if (current) this.#retire(current);
    this.#leases.set(state.accountId, lease);
  }

  #grantingFor(accountId: string): boolean {
    for (const key of this.#granting.keys()) if (key.startsWith(`${accountId}/`)) return true;
    return false;
  }

  /** A retired lease of the account billing has not said closed yet, if any. */
  #retiredOf(accountId: string): HeldLease | undefined {
    for (const lease of this.#retired.values()) if (lease.accountId === accountId) return lease;
    return undefined;
  }

  #retire(lease: HeldLease): void {
    lease.open = false;
    if (this.#leases.get(lease.accountId) === lease) this.#leases.delete(lease.accountId);
    this.#retired.set(lease.leaseId, lease);
  }

  /**
   * One heartbeat: the reports of the leases that need one (reportReason), final
   * for leases fenced, retired or idle (nothing admitted and nothing in flight for LEASE_IDLE_MS).
   * Every other open lease is extended by the reply's session validity alone, at no cost to
   * billing: an account sending now and then stays warm. Only replies newer than the last applied
   * to a lease change it. Skipped during back-off.
   */
  /**
   * One heartbeat (never two at once: a call while one is on the way waits for that one). Requests
   * whose lease lapsed while it was on the way wait for its reply too (see #admitting).
   */
  async beat(): Promise<void> {
    if (this.#beating) return this.#beating;
    let done!: () => void;
    this.#beating = new Promise<void>((resolve) => (done = resolve));
    try {
      await this.#beatOnce();
    } finally {
      this.#beating = undefined;
      done();
    }
  }

  async #beatOnce(): Promise<void> {
    const now = this.#now();
    if (now < this.#nextBeatAt || this.#superseded) return;
    const all = [...this.#leases.values(), ...this.#retired.values()];
    // With no lease left a heartbeat still goes while a refusal is cached (its reply lifts it) or
    // a grant went unanswered (its reply lists a lease made for it). The first one goes at start:
    // it takes this process's incarnation, so billing releases what an earlier process under the
    // same edge id held at once, with no request needed.
    if (all.length === 0 && this.#refused.size === 0 && this.#unansweredGrants.size === 0 && this.#incarnation !== 0n)
      return;
    // A lease that admitted anything since the last beat is reported in this one (it changed):
    // its demand is what it admitted over the time since that beat.
    const elapsed = now - this.#lastBeatAt;
    const sequence = this.nextSequence();
    const reports: LeaseReport[] = [];
    const unreported: HeldLease[] = [];
    const due: Array<{ lease: HeldLease; final: boolean; nextWindow: boolean; reason: string; urgency: number }> = [];
    let shrinks = 0;
    for (const lease of all) {
      const idle = lease.inFlight === 0 && now - lease.lastAdmittedAt > this.#idleMs;
      // Past its validity is not final (see #grant): the reply renews it or says it is fenced.
      const final = !lease.open || idle || this.#retired.has(lease.leaseId);
      if (final && !this.#retired.has(lease.leaseId)) this.#retire(lease);
      const nextWindow = !final && lease.windowEnding(now, this.#nextWindowWithinMs(lease));
      const reason = final ? "final" : (this.#reportReason(lease, now) ?? (nextWindow ? "next window" : undefined));
      if (!reason || (reason === "idle credit" && shrinks++ >= MAX_IDLE_SHRINKS_PER_BEAT)) unreported.push(lease);
      else due.push({ lease, final, nextWindow, reason, urgency: this.#urgency(lease, reason, nextWindow, now) });
    }
    // The most urgent first, up to MAX_REPORTS_PER_BEAT; the others wait for the next beat,
    // extended by the session meanwhile (their pins, if any, hold until a reply).
    due.sort((a, b) => a.urgency - b.urgency);
    for (const [i, { lease, final, nextWindow, reason }] of due.entries()) {
      if (i >= this.#maxReportsPerBeat) {
        unreported.push(lease);
        continue;
      }
      const keep = reason === "idle credit" ? lease.largestWorstCase : undefined;
      lease.pin(sequence, keep);
      const report = lease.report(final, elapsed, sequence, nextWindow);
      reports.push({ ...report, slotsPinned: true, keepSpareCreditMicros: keep });
      lease.resetDemand();
    }
    this.#lastBeatAt = now;
    const unanswered = [...this.#unansweredGrants];
    let reply;
    try {
      reply = await this.#billing.heartbeat(
        { ...this.#caller(), sequence, leases: reports, unansweredGrantAccounts: unanswered },
        // A reply is worth waiting for as long as it can still renew: until send + TTL − margin.
        // Dropped at TTL / 2, a busy billing's late replies were lost, every lease lapsed and each
        // request went to billing for a grant, keeping it busy (1,000 sparse accounts: 12 grants
        // per account per minute, not 3.7; p50 latency 5.2 s, not 11 ms). The next beat waits.
        { timeoutMs: Math.max(100, this.ttlMs - this.marginMs) },
      );
    } catch (err) {
      const error = AppError.fromGrpc(err);
      if (error.code === "edge_superseded") {
        this.#supersede(error);
        return;
      }
      this.#beatFailures += 1;
      this.#nextBeatAt = this.#now() + nextBackoffMs(this.#beatFailures, this.ttlMs);
      this.#log.warn({ err, failures: this.#beatFailures }, "lease heartbeat failed; backing off");
      return;
    }
    this.#answered(reply.incarnation, now);
    this.#beatFailures = 0;
    this.#nextBeatAt = -Infinity;
    for (const accountId of unanswered) this.#unansweredGrants.delete(accountId);
    const at = { sequence, sentAt: now, receivedAt: this.#now(), marginMs: this.marginMs };
    const listed = new Set<string>();
    for (const state of reply.leases) {
      listed.add(state.leaseId);
      this.#applyBeat(state, at);
    }
    // Valid at the send (so billing's session covered it throughout): a lease past its validity
    // was reported, and only billing's answer on it may bring it back.
    for (const lease of unreported) {
      if (!listed.has(lease.leaseId) && lease.usable(now)) lease.extend(now, Number(reply.validForMs), this.marginMs);
    }
    for (const [key, refusal] of this.#refused) if (refusal.at < now) this.#refused.delete(key);
    for (const [id, at] of this.#closed) if (now - at > FORGET_CLOSED_MS) this.#closed.delete(id);
  }

  /**
   * Why an open lease goes in this heartbeat, or undefined when the session alone extends it:
   * admitted totals or demand changed; its last report has no reply applied yet (lost, billing
   * may not have it); it is past its validity here; slots lent beyond those in flight go back; or
   * (capped per beat), idle for
   * 2 TTL, it holds more credit than one request's worst case (never with a grant of the
   * account in flight, whose older reply could bring the room back).
   */
  #reportReason(lease: HeldLease, now: number): string | undefined {
    if (lease.changed) return "changed";
    if (lease.lastReplySequence < lease.lastReportSequence) return "unanswered";
    if (!lease.usable(now)) return "lapsed";
    if (lease.slotsToReturn()) return "slots";
    const idle = lease.inFlight === 0 && now - lease.lastAdmittedAt > 2 * this.ttlMs;
    if (idle && lease.credit && lease.spare(lease.credit) > lease.largestWorstCase) {
      if (!this.#grantingFor(lease.accountId)) return "idle credit";
    }
    return undefined;
  }

  /**
   * Where a due report goes in the beat's order (lower first). A lease asking for the next
   * window's room within 2 TTL of the boundary goes with those only a reply can renew: deferred
   * again it would reach the boundary without the room, and its next request would wait on a
   * grant. Without this, 1,000 sparse accounts whose minutes all end together (a report each
   * spread over the last seconds, besides ~200 changed leases a beat) passed the per-beat cap, and
   * the reports left for last, those nearest the boundary, were the ones that missed it (5% of
   * the accounts made a second grant each minute).
   */
  #urgency(lease: HeldLease, reason: string, nextWindow: boolean, now: number): number {
    if (nextWindow && lease.windowEnding(now, 2 * this.ttlMs)) return 0;
    return REPORT_URGENCY[reason]!;
  }

  /**
   * How long before the end of a window it used a lease asks for the next one's room: between one
   * TTL and nextWindowAheadMs − TTL, at a point of its own (from its id), so that an edge's leases
   * used in a minute do not all ask in its last heartbeat.
   */
  #nextWindowWithinMs(lease: HeldLease): number {
    const spread = Math.max(0, nextWindowAheadMs(this.ttlMs) - 2 * this.ttlMs);
    const point = Number.parseInt(lease.leaseId.slice(0, 8), 16);
    return this.ttlMs + (Number.isNaN(point) ? 0 : (point / 2 ** 32) * spread);
  }

  #applyBeat(state: LeaseState, at: Parameters<HeldLease["apply"]>[1]): void {
    const retired = this.#retired.get(state.leaseId);
    if (retired) {
      if (state.status === LeaseStatus.LEASE_STATUS_CLOSED) {
        this.#retired.delete(state.leaseId);
        this.#closed.set(state.leaseId, at.receivedAt);
      }
      return;
    }
    const lease = this.#leases.get(state.accountId);
    if (lease?.leaseId === state.leaseId) {
      lease.apply(state, at);
      // Fenced: stop admitting now; its final report goes with the next heartbeat.
      if (!lease.open) this.#retire(lease);
      return;
    }
    if (state.status !== LeaseStatus.LEASE_STATUS_CLOSED && !this.#grantingFor(state.accountId)) {
      // A lease billing opened for this edge whose grant reply was lost: give it back. (With a
      // grant of the account in flight, it is that grant's lease, whose reply is on its way.)
      const orphan = new HeldLease(state, "", at.receivedAt);
      orphan.apply(state, at);
      this.#retire(orphan);
    }
  }

  /**
   * A recall (docs/architecture.md#revocation-stops-at-once): drops the lease, or one subscription's budget in it, and returns
   * the report to ack with (final for a whole lease), or undefined when the edge holds no such lease.
   */
  recall(leaseId: string, subscriptionId: string): { sequence: bigint; report: LeaseReport } | undefined {
    const lease = [...this.#leases.values()].find((l) => l.leaseId === leaseId) ?? this.#retired.get(leaseId);
    if (!lease) return undefined;
    // Billing changed what it would answer (a renewal, a recall for another edge's grant): a
    // refusal cached for the account or subscription asks billing again.
    for (const key of this.#refused.keys()) {
      if (key.startsWith(subscriptionId ? `${lease.accountId}/${subscriptionId}/` : `${lease.accountId}/`)) {
        this.#refused.delete(key);
      }
    }
    const now = this.#now();
    const elapsed = now - this.#lastBeatAt;
    const sequence = this.nextSequence();
    if (subscriptionId) {
      const budget = lease.budgets.get(subscriptionId);
      if (budget) {
        budget.open = false;
        budget.recalledAt = sequence;
      }
      return { sequence, report: lease.report(false, elapsed, sequence) };
    }
    this.#retire(lease);
    return { sequence, report: lease.report(true, elapsed, sequence) };
  }

  /** Shutdown: every lease returned with its final totals in one ReturnLeases call. */
  async returnAll(): Promise<void> {
    const all = [...this.#leases.values(), ...this.#retired.values()];
    if (all.length === 0 || this.#superseded) return;
    const elapsed = this.#now() - this.#lastBeatAt;
    const sequence = this.nextSequence();
    const reports = all.map((lease) => lease.report(true, elapsed, sequence));
    for (const lease of all) this.#retire(lease);
    await this.#billing.returnLeases({ ...this.#caller(), sequence, leases: reports }, { timeoutMs: this.ttlMs });
    this.#retired.clear();
  }
}

/**
 * The demand a GrantLease sizes by: the lease's as last measured (or the request in hand when
 * the edge has none), its credit at least the likely worst case of the requests in hand, and for
 * a subscription's request its budget's tokens, which billing reads when `subscription_id` names
 * the budget it grows (so a warm subscriber gets room ahead too).
 */
function demandFor(report: LeaseReport | undefined, inHand: InHand, subscriptionId: string): LeaseNeed {
  const measured = report?.demandPerSecond ?? { creditMicros: inHand.credit, requests: inHand.requests, tokens: 0n };
  const credit = measured.creditMicros > inHand.likelyCredit ? measured.creditMicros : inHand.likelyCredit;
  const account = { ...measured, creditMicros: credit };
  if (!subscriptionId) return { ...account, tokens: 0n, subscriptionId: "", keyId: "" };
  const budget = report?.budgetDemand.find((d) => d.subscriptionId === subscriptionId);
  return {
    creditMicros: account.creditMicros,
    requests: budget?.requests ?? inHand.requests,
    tokens: budget?.tokens ?? inHand.tokens,
    subscriptionId,
    keyId: "",
  };
}

/** Credit the lease can pay now: its own spare, and no more than a spend-limited key's room has. */
function spareCredit(lease: HeldLease, keyId: string, now: number): bigint {
  if (!lease.credit || !lease.usable(now)) return 0n;
  let spare = lease.spare(lease.credit);
  const key = keyBudgetOf(lease, keyId);
  if (key) {
    const rooms = key.rooms.filter((r) => r.usableFrom <= now && now < r.validUntil);
    const room = rooms.reduce((most, r) => (lease.spare(r) > most ? lease.spare(r) : most), 0n);
    if (room < spare) spare = room;
  }
  return spare;
}

/** Billing refused the request: its account (or key, or plan) cannot cover it now. */
const isRefusal = (error: AppError) => error.httpStatus === 402 || error.httpStatus === 429;

/** The least credit a request in hand can be served with (a request without max_tokens shrinks). */
const creditNeeded = (inHand: InHand) => (inHand.minCredit > 0n ? inHand.minCredit : inHand.credit);

/**
 * Whether a refusal cached from billing answers this request too: a rate-limit refusal never
 * stops step two, whose request is already counted (it asks for credit alone); a 402 for credit
 * or a key's limit answers only requests needing at least the credit that was refused, so a large
 * request's 402 does not refuse the small ones the balance still pays (and each refusal billing
 * gives lowers the bar).
 */
function refuses(refusal: { error: AppError; credit: bigint }, inHand: InHand): boolean {
  if (refusal.error.httpStatus === 429) return inHand.requests > 0n;
  if (refusal.error.code === "insufficient_credits" || refusal.error.code === "key_limit_exceeded") {
    return creditNeeded(inHand) >= refusal.credit;
  }
  return true;
}

/** What a client is told by an edge another process replaced (never a 402/429). */
function superseded(cause?: unknown): AppError {
  return new AppError("service_unavailable", "This server was replaced by another; please retry the request.", {
    cause: cause ?? "edge superseded",
  });
}

/** A subscription ticket's lease is no longer the account's (takeWorstCase starts it again). */
class LeaseGone extends Error {}

/** Billing cannot be asked (down, or the lease changed underneath): retry shortly, never 402/429. */
function unavailable(ttlMs: number, why: string, cause?: unknown): AppError {
  return new AppError("service_unavailable", "The service is temporarily unable to admit requests; please retry.", {
    headers: { "retry-after": String(Math.max(1, Math.ceil(ttlMs / 1000))) },
    cause: cause ?? why,
  });
}
