import { performance } from "node:perf_hooks";
import type { Logger } from "@mkt/runtime/logger";
import type { LeaseReport } from "@mkt/proto/billing/v1/leases";
import type { Histogram } from "prom-client";
import type { HeldLease } from "./held-lease.ts";
import { HeldLeases } from "./held-leases.ts";
import type { Ticket } from "./lease-admission.ts";
import type { AdmitNeed, FitToCredit, InHand, WorstCase, WorstCaseOn } from "./admission-need.ts";
import type { ScopeKey } from "./scope-key.ts";
import {
  admitRequest,
  moveToPlan,
  release,
  takeWorstCase,
  takeWorstCaseInMemory,
  type AdmissionPort,
} from "./request-admission.ts";
import { RefusalCache } from "./refusal-cache.ts";
import { admitOrGrant, type ColdPath, type GrantAnswer } from "./admit-or-grant.ts";
import { GrantCoalescer } from "./grant-coalescer.ts";
import { grantRequest, reportWithGrant } from "./grant-request.ts";
import { planHeartbeat } from "./heartbeat-plan.ts";
import { unavailable } from "./lease-errors.ts";
import type { IsolationWatch } from "./isolation-watch.ts";
import { BillingLeaseSettings } from "./lease-settings.ts";
import { LeaseCalls, type LeaseBilling } from "./lease-calls.ts";

export type { AdmitNeed, FitToCredit, WorstCase, WorstCaseOn } from "./admission-need.ts";
export type { LeaseBilling } from "./lease-calls.ts";

export interface LeaseTableOptions {
  billing: LeaseBilling;
  /**
   * Billing's settings as its replies give them (lease-settings.ts); the table applies every
   * reply's. A table of its own when omitted.
   */
  settings?: BillingLeaseSettings;
  /** The TTL to pace by until billing's first reply, when `settings` is omitted (tests). */
  ttlMs?: number;
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

/**
 * LEASE_IDLE_MS's default: an account that sends a request now and then (every few seconds up to
 * a minute) keeps its lease, extended by the heartbeat at no cost to billing, so its requests are
 * admitted in memory instead of each waiting on a GrantLease.
 */
export const DEFAULT_LEASE_IDLE_MS = 60_000;

/**
 * The edge's admission leases, one table per edge process (docs/leases.md#the-edges-side lists
 * what each module decides). Admission is in memory; billing is called only on the cold or short
 * path (one GrantLease per scope in flight), by the heartbeat (`beat`, driven by
 * lease-heartbeat.ts), and on `returnAll`; a recall is acked over NATS with the report `recall`
 * gives. The table owns the leases' state and the clock and applies what replies say of the
 * leases; the decisions are the modules'. lease-calls.ts sends the calls and applies what their
 * answers say of the edge itself (settings, incarnation, backoff, a superseded process, 503s).
 */
export class LeaseTable {
  /** Billing's LEASE_TTL_MS, EDGE_ISOLATION_MS and MAX_REQUEST_MS as its latest replies gave them. */
  readonly settings: BillingLeaseSettings;
  readonly #calls: LeaseCalls;
  readonly #now: () => number;
  readonly #idleMs: number;
  readonly #maxReportsPerBeat: number | undefined;
  readonly #held = new HeldLeases();
  readonly #grants = new GrantCoalescer<GrantAnswer>();
  readonly #refused: RefusalCache;
  readonly #granting = (accountId: string) => this.#grants.grantingFor(accountId);
  #lastBeatAt: number;
  /** The heartbeat on the way, until its reply is applied (or it failed). */
  #beating: Promise<void> | undefined;
  /** What a request's admission reads and calls: the leases in use, and the cold path. */
  readonly #port: AdmissionPort;

  constructor(options: LeaseTableOptions) {
    this.settings = options.settings ?? new BillingLeaseSettings({ initialTtlMs: options.ttlMs });
    this.#now = options.now ?? (() => performance.now());
    const { billing, edgeId, log, isolation } = options;
    const dropAll = () => this.#held.clear();
    this.#calls = new LeaseCalls({ billing, edgeId, log, isolation, settings: this.settings, now: this.#now, dropAll });
    this.#idleMs = options.idleMs ?? DEFAULT_LEASE_IDLE_MS;
    this.#maxReportsPerBeat = options.maxReportsPerBeat;
    this.#lastBeatAt = this.#now();
    this.#refused = new RefusalCache(() => this.ttlMs);
    const inUse = (accountId: string) => this.#held.inUse(accountId);
    const settings = this.settings;
    const coldPath: ColdPath = {
      get ttlMs() {
        return settings.ttlMs;
      },
      now: this.#now,
      inUse,
      beating: () => this.#beating,
      refusals: this.#refused,
      slotsEndedUnreported: (accountId) => this.#held.endedUnreported(accountId).length > 0,
      grants: this.#grants,
      grant: (key, tier, inHand, members) => this.#grant(key, tier, inHand, members),
    };
    this.#port = {
      get ttlMs() {
        return settings.ttlMs;
      },
      now: this.#now,
      superseded: () => this.superseded,
      inUse,
      admitting: (key, tier, inHand, attempt) => admitOrGrant(coldPath, key, tier, inHand, attempt),
    };
  }

  get edgeId(): string {
    return this.#calls.edgeId;
  }

  /** Billing's LEASE_TTL_MS, from its latest reply. */
  get ttlMs(): number {
    return this.settings.ttlMs;
  }

  /** Validity is cut this much short of billing's, for the time a reply spent on the way. */
  get marginMs(): number {
    return this.settings.marginMs;
  }

  /** Whether another process took this edge's id (readiness fails; nothing is admitted). */
  get superseded(): boolean {
    return this.#calls.superseded;
  }

  /** Billing started `incarnation` of this edge: an older process drops everything (lease-calls.ts). */
  supersededBy(incarnation: bigint): void {
    this.#calls.supersededBy(incarnation);
  }

  /** Times each GrantLease from now on (the edge's `mkt_lease_grant_seconds`). */
  observeGrants(histogram: Pick<Histogram, "observe">): void {
    this.#calls.observeGrants(histogram);
  }

  /** The edge's next sequence number, increasing across all of its lease calls. */
  nextSequence(): bigint {
    return this.#calls.nextSequence();
  }

  /** Requests admitted here and still running. */
  inFlight(): number {
    return this.#held.inFlight();
  }

  /** The lease the account admits on (tests and metrics). */
  leaseOf(accountId: string): HeldLease | undefined {
    return this.#held.inUse(accountId);
  }

  /** Step one of a request's admission (request-admission.ts: all four steps). */
  admit(need: AdmitNeed): Promise<Ticket> {
    return admitRequest(this.#port, need);
  }

  /** Moves an admitted request to an open endpoint's plan. */
  moveToPlan(ticket: Ticket, productId: string): Promise<void> {
    return moveToPlan(this.#port, ticket, productId);
  }

  /** Step two, once the prompt is counted: the worst case, from memory or through a grant. */
  takeWorstCase(ticket: Ticket, wanted: WorstCase | WorstCaseOn, fit?: FitToCredit): Promise<Ticket> {
    return takeWorstCase(this.#port, ticket, wanted, fit);
  }

  /** Step two from memory only (undefined when the lease cannot cover it now). */
  takeWorstCaseInMemory(ticket: Ticket, wanted: WorstCase): Ticket | undefined {
    return takeWorstCaseInMemory(this.#port, ticket, wanted);
  }

  /** The request's relay ended: its slot goes back to the lease (no call to billing). */
  release(ticket: Ticket): void {
    release(ticket);
  }

  /**
   * The cold or short path: one GrantLease covering the requests in hand, with the report of the
   * account's lease (grant-request.ts). A refusal is cached for the scope only when the grant was
   * for one request: a batch's says nothing of each of its requests alone.
   */
  async #grant(key: ScopeKey, tier: string, inHand: InHand, members: number): Promise<GrantAnswer> {
    if (inHand.requests > 0n && (key.subscriptionId || key.openProductId)) await this.#reportEndedCalls(key.accountId);
    const held = this.#held.inUse(key.accountId) ?? this.#held.retiredOf(key.accountId);
    const sequence = this.nextSequence();
    const sentAt = this.#now();
    const { report, final } = reportWithGrant(held, sequence, sentAt, sentAt - this.#lastBeatAt);
    if (held && final) this.#held.retire(held);
    return this.#calls.grantLease({ sequence, ...grantRequest(key, tier, inHand, report) }, sentAt, {
      refused: (error) => {
        if (members === 1) this.#refused.remember(key, error, sentAt, inHand);
      },
      granted: (reply) => {
        if (!reply.lease) throw unavailable(this.ttlMs, "Billing sent no lease");
        this.#held.adopt(reply.lease, tier, { sequence, sentAt, receivedAt: this.#now(), marginMs: this.marginMs });
        return { includedCrossing: reply.includedCrossing };
      },
    });
  }

  /**
   * Before a grant that takes a slot: calls that ended on the account's retired leases since their
   * last report are reported (ReturnLeases, final: nothing is admitted on those leases any more).
   * Billing counts a closed lease's slots as the calls its last report had in flight, and only a
   * heartbeat reported a retired lease: a grant in between counted the slots of calls that had
   * ended and refused a subscriber within its max_concurrent 429 (and the edge answered its
   * requests with that refusal until a heartbeat's reply). Billing unreachable or failing: a 503,
   * never a grant that could blame the client for the edge's unreported ends.
   */
  async #reportEndedCalls(accountId: string): Promise<void> {
    const ended = this.#held.endedUnreported(accountId);
    if (ended.length === 0) return;
    const sequence = this.nextSequence();
    const sentAt = this.#now();
    const leases = ended.map((lease) => lease.report(true, sentAt - this.#lastBeatAt, sequence));
    await this.#calls.returnLeases({ sequence, leases }, sentAt);
  }

  /**
   * One heartbeat (never two at once: a call while one is on the way waits for that one). Requests
   * whose lease lapsed while it was on the way wait for its reply too (admit-or-grant.ts).
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

  /** Skipped while backing off from a failing billing. */
  async #beatOnce(): Promise<void> {
    const now = this.#now();
    if (this.#calls.backingOff(now) || this.superseded) return;
    const all = this.#held.all();
    // With no lease left a heartbeat still goes while a refusal is cached (its reply lifts it) or
    // a grant went unanswered (its reply lists a lease made for it). The first one goes at start:
    // it takes this process's incarnation, so billing releases what an earlier process under the
    // same edge id held at once, with no request needed.
    const idle = all.length === 0 && this.#refused.size === 0 && this.#calls.unansweredGrants === 0;
    if (idle && this.#calls.incarnation !== 0n) return;
    const plan = planHeartbeat(
      all.map((lease) => ({ lease, retired: this.#held.isRetired(lease) })),
      now,
      { ttlMs: this.ttlMs, idleMs: this.#idleMs, maxReports: this.#maxReportsPerBeat, grantingFor: this.#granting },
    );
    const sequence = this.nextSequence();
    const reports = this.#held.reportInBeat(plan, sequence, now - this.#lastBeatAt);
    this.#lastBeatAt = now;
    await this.#calls.heartbeat({ sequence, leases: reports }, now, (reply) => {
      const at = { sequence, sentAt: now, receivedAt: this.#now(), marginMs: this.marginMs };
      this.#held.applyBeatReply(reply.leases, Number(reply.validForMs), plan.unreported, at, this.#granting);
      this.#refused.liftBefore(now);
    });
  }

  /**
   * A recall (docs/architecture.md#revocation-stops-at-once): drops the lease, or one
   * subscription's budget in it, and returns the report to ack with (final for a whole lease), or
   * undefined when the edge holds no such lease. Billing changed what it would answer (a renewal,
   * a recall for another edge's grant), so a refusal cached for the account or subscription goes.
   */
  recall(leaseId: string, subscriptionId: string): { sequence: bigint; report: LeaseReport } | undefined {
    const lease = this.#held.find(leaseId);
    if (!lease) return undefined;
    this.#refused.liftOnRecall(lease.accountId, subscriptionId);
    const elapsed = this.#now() - this.#lastBeatAt;
    const sequence = this.nextSequence();
    return { sequence, report: this.#held.recall(lease, subscriptionId, sequence, elapsed) };
  }

  /** Shutdown: every lease returned with its final totals in one ReturnLeases call. */
  async returnAll(): Promise<void> {
    if (this.#held.all().length === 0 || this.superseded) return;
    const elapsed = this.#now() - this.#lastBeatAt;
    const sequence = this.nextSequence();
    const reports = this.#held.returnAll(sequence, elapsed);
    await this.#calls.returnAtShutdown({ sequence, leases: reports });
    this.#held.clear();
  }
}
