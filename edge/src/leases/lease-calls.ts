import type { PromiseClient } from "@mkt/runtime/grpc-client";
import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";
import type { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import type {
  GrantLeaseRequest,
  GrantLeaseResponse,
  HeartbeatRequest,
  HeartbeatResponse,
  LeaseSettings,
  ReturnLeasesRequest,
} from "@mkt/proto/billing/v1/leases";
import type { Histogram } from "prom-client";
import { EdgeIncarnation, isSuperseded, supersededError } from "./edge-incarnation.ts";
import { GRANT_TIMEOUT_MS } from "./grant-request.ts";
import { nextBackoffMs } from "./heartbeat-backoff.ts";
import type { IsolationWatch } from "./isolation-watch.ts";
import { unavailable } from "./lease-errors.ts";
import type { BillingLeaseSettings } from "./lease-settings.ts";
import { isRefusal } from "./refusal-cache.ts";

export type LeaseBilling = Pick<PromiseClient<BillingServiceClient>, "grantLease" | "heartbeat" | "returnLeases">;

/** A call's fields that say who calls: added here to every call. */
type Caller = "edgeId" | "incarnation" | "bootId";

/**
 * What the lease table does with a grant's answer. Both run in the turn the answer arrives, right
 * after what it says of the edge (as `apply` does for a heartbeat): no other reply's settings, nor
 * a supersede, come between the two halves of one answer.
 */
export interface GrantHandler<T> {
  granted(reply: GrantLeaseResponse): T;
  /** Billing refused the grant (402/429: the account's answer, thrown after this). */
  refused(error: AppError): void;
}

export interface LeaseCallsOptions {
  billing: LeaseBilling;
  /** Applied from every reply before anything else in it. */
  settings: BillingLeaseSettings;
  edgeId: string;
  log: Logger;
  /** The edge's monotonic clock in ms. */
  now: () => number;
  isolation: IsolationWatch | undefined;
  /** Drops every lease the edge holds: billing closed them all for the process that took the id. */
  dropAll: () => void;
}

/**
 * The edge's lease calls to billing, and what their answers say of the edge rather than of its
 * leases (those the lease table applies): who calls and in which sequence, billing's settings and
 * the incarnation a reply carries, contact for the isolation watch, the heartbeats' backoff, a
 * process superseded, and the 503 a client is told when billing cannot answer (never a 402/429:
 * docs/adr/0027-dependency-outage-is-503.md). Kept apart from the table so that every call applies
 * its answer the same way, and the table reads as what it does with leases.
 */
export class LeaseCalls {
  readonly #billing: LeaseBilling;
  readonly #settings: BillingLeaseSettings;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #isolation: IsolationWatch | undefined;
  readonly #dropAll: () => void;
  readonly #self: EdgeIncarnation;
  /**
   * Accounts whose GrantLease got no answer (timed out, billing unreachable): billing may have
   * opened a lease the edge never heard of. Heartbeats name them and billing lists their leases,
   * which the edge then gives back (HeldLeases.applyBeat). Each is named until a heartbeat sent
   * from the time kept here is answered: the grant's deadline and one TTL more. Billing rolls back
   * a grant whose caller stopped waiting (grant-lease.ts), so a beat sent after that sees any lease
   * the grant made; one sent before may have run before the grant committed, and the lease would
   * then hold credit and slots for as long as the edge's session lives.
   */
  readonly #unansweredGrants = new Map<string, number>();
  #sequence = 0n;
  #beatFailures = 0;
  #nextBeatAt = -Infinity;
  #grantTimes: Pick<Histogram, "observe"> | undefined;

  constructor(options: LeaseCallsOptions) {
    const { isolation, settings } = options;
    this.#billing = options.billing;
    this.#self = new EdgeIncarnation(options.edgeId);
    this.#isolation = isolation;
    this.#settings = settings;
    // The isolation watch runs by billing's bound as the edge does (it only goes down).
    if (isolation) settings.onChange(() => isolation.setBound(settings.isolationMs));
    this.#log = options.log;
    this.#now = options.now;
    this.#dropAll = options.dropAll;
  }

  get edgeId(): string {
    return this.#self.edgeId;
  }

  /** Billing's number for this process: 0 until its first reply. */
  get incarnation(): bigint {
    return this.#self.number;
  }

  /** Whether another process took this edge's id. */
  get superseded(): boolean {
    return this.#self.superseded;
  }

  /** Accounts the next heartbeat names for a GrantLease that got no answer. */
  get unansweredGrants(): number {
    return this.#unansweredGrants.size;
  }

  /** Whether a heartbeat now would be skipped: billing failed the last ones and the backoff runs. */
  backingOff(now: number): boolean {
    return now < this.#nextBeatAt;
  }

  /** Times each GrantLease from now on. */
  observeGrants(histogram: Pick<Histogram, "observe">): void {
    this.#grantTimes = histogram;
  }

  /** The edge's next sequence number, increasing across all of its lease calls. */
  nextSequence(): bigint {
    this.#sequence += 1n;
    return this.#sequence;
  }

  /**
   * One GrantLease sent at `sentAt`. Billing's own refusal (4xx) is thrown as it came; no answer
   * or a failure is a 503, and the account is named in the next heartbeat.
   */
  async grantLease<T>(request: Omit<GrantLeaseRequest, Caller>, sentAt: number, handler: GrantHandler<T>): Promise<T> {
    let reply;
    try {
      reply = await this.#billing.grantLease(
        { ...this.#self.caller(), ...request },
        { timeoutMs: this.#grantTimeoutMs() },
      );
    } catch (err) {
      const error = AppError.fromGrpc(err);
      if (isSuperseded(error)) throw this.#supersede(error);
      if (isRefusal(error)) handler.refused(error);
      if (error.httpStatus < 500) throw error;
      const coveredFrom = sentAt + this.#grantTimeoutMs() + this.#settings.ttlMs;
      this.#unansweredGrants.set(
        request.accountId,
        Math.max(coveredFrom, this.#unansweredGrants.get(request.accountId) ?? coveredFrom),
      );
      throw this.#unavailable(error);
    } finally {
      this.#grantTimes?.observe((this.#now() - sentAt) / 1000);
    }
    this.#answered(reply.incarnation, sentAt, reply.settings);
    return handler.granted(reply);
  }

  /** Final reports a grant waits for, sent at `sentAt`: any failure is a 503 to the request. */
  async returnLeases(request: Omit<ReturnLeasesRequest, Caller>, sentAt: number): Promise<void> {
    try {
      const reply = await this.#billing.returnLeases(
        { ...this.#self.caller(), ...request },
        { timeoutMs: this.#grantTimeoutMs() },
      );
      this.#answered(reply.incarnation, sentAt, reply.settings);
    } catch (err) {
      const error = AppError.fromGrpc(err);
      if (isSuperseded(error)) throw this.#supersede(error);
      throw this.#unavailable(error);
    }
  }

  /**
   * One Heartbeat sent at `sentAt`, naming the accounts of unanswered grants. `apply` gets its
   * reply in the turn it arrives (GrantHandler says why); a failure backs the next beats off
   * instead, and a superseded process applies nothing.
   */
  async heartbeat(
    request: Omit<HeartbeatRequest, Caller | "unansweredGrantAccounts">,
    sentAt: number,
    apply: (reply: HeartbeatResponse) => void,
  ): Promise<void> {
    const unanswered = [...this.#unansweredGrants.keys()];
    let reply;
    try {
      // A reply is worth waiting for as long as it can still renew: until send + TTL − margin.
      // Dropped at TTL / 2, a busy billing's late replies were lost, every lease lapsed and each
      // request went to billing for a grant, keeping it busy (1,000 sparse accounts: 12 grants
      // per account per minute, not 3.7; p50 latency 5.2 s, not 11 ms). The next beat waits.
      const timeoutMs = Math.max(100, this.#settings.ttlMs - this.#settings.marginMs);
      reply = await this.#billing.heartbeat(
        { ...this.#self.caller(), ...request, unansweredGrantAccounts: unanswered },
        { timeoutMs },
      );
    } catch (err) {
      const error = AppError.fromGrpc(err);
      if (isSuperseded(error)) return void this.#supersede(error);
      this.#beatFailures += 1;
      this.#nextBeatAt = this.#now() + nextBackoffMs(this.#beatFailures, this.#settings.ttlMs);
      this.#log.warn({ err, failures: this.#beatFailures }, "lease heartbeat failed; backing off");
      return;
    }
    this.#answered(reply.incarnation, sentAt, reply.settings);
    for (const accountId of unanswered) {
      if (sentAt >= this.#unansweredGrants.get(accountId)!) this.#unansweredGrants.delete(accountId);
    }
    apply(reply);
  }

  /** Shutdown's final reports: the process is stopping, so nothing of the answer is applied. */
  returnAtShutdown(request: Omit<ReturnLeasesRequest, Caller>): Promise<unknown> {
    return this.#billing.returnLeases({ ...this.#self.caller(), ...request }, { timeoutMs: this.#settings.ttlMs });
  }

  /** A grant (and the report before one) is worth waiting for longer than a TTL (grant-request.ts). */
  #grantTimeoutMs(): number {
    return Math.max(GRANT_TIMEOUT_MS, this.#settings.ttlMs);
  }

  /** Billing down or failing: never a 402/429 (docs/adr/0027-dependency-outage-is-503.md). */
  #unavailable(error: AppError): AppError {
    return unavailable(this.#settings.ttlMs, "Billing is unavailable", error);
  }

  /**
   * Billing answered a call sent at `sentAt`. Its settings apply before anything the reply says
   * (a lease's validity is cut by the TTL's margin; the isolation bound covers what it grants).
   */
  #answered(incarnation: bigint, sentAt: number, settings: LeaseSettings | undefined): void {
    this.#settings.apply(settings);
    this.#self.answered(incarnation);
    this.#isolation?.contact(sentAt);
    // Billing answers again: the heartbeats' backoff ends. Left to run its course (up to 4 TTL),
    // the session the first grant after an outage renewed lapsed again a TTL later, and the next
    // grant fenced every lease of the edge a second time, with the calls admitted since in flight.
    this.#beatFailures = 0;
    this.#nextBeatAt = -Infinity;
  }

  /**
   * Billing announced it started `incarnation` of this edge (leases.recall, lease-recall.ts): a
   * process with an older number has been replaced and its leases closed, and learns it here
   * rather than from its next call refused, up to a TTL later (meanwhile it admitted on room billing
   * had released). A process with no number yet has no lease to drop: its first answer says.
   */
  supersededBy(incarnation: bigint): void {
    const own = this.#self.number;
    if (own === 0n || own >= incarnation) return;
    this.#supersede(
      new AppError("edge_superseded", `Edge ${this.edgeId}: incarnation ${incarnation} started after ${own}.`),
    );
  }

  /**
   * Another process took this edge's id and billing closed every lease of this one: admitting on
   * them would be admitting on room billing released. So nothing is admitted any more, the
   * answers in flight end and readiness fails.
   */
  #supersede(err: AppError): AppError {
    if (this.#self.supersede()) {
      this.#dropAll();
      this.#log.error(
        { edgeId: this.edgeId, incarnation: this.#self.number },
        "another process took this EDGE_ID: this one admits nothing more (give every edge its own EDGE_ID)",
      );
      this.#isolation?.end(supersededError());
    }
    return supersededError(err);
  }
}
