import { LeaseStatus, type LeaseReport, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { HeldLease, type ReplyTimes } from "./held-lease.ts";
import { GRANT_TIMEOUT_MS } from "./grant-request.ts";
import type { HeartbeatPlan } from "./heartbeat-plan.ts";

/** How long a closed lease's id is remembered: past any grant reply sent before it closed. */
export const FORGET_CLOSED_MS = 2 * GRANT_TIMEOUT_MS;

/**
 * The leases an edge holds, in three states: in use (one per account, admitting), retired (no
 * longer admitting, reported final in every heartbeat until billing says closed) and closed (ids
 * only, so that a late grant reply cannot bring one back). Every move between them is decided
 * here, from billing's replies and recalls; the table owns the calls and the clock.
 */
export class HeldLeases {
  readonly #inUse = new Map<string, HeldLease>();
  readonly #retired = new Map<string, HeldLease>();
  /** Lease id → when billing's reply said it closed (the edge's clock). */
  readonly #closed = new Map<string, number>();

  /** The lease the account admits on. */
  inUse(accountId: string): HeldLease | undefined {
    return this.#inUse.get(accountId);
  }

  /** Every lease billing may still hold open for this edge: those in use, then the retired. */
  all(): HeldLease[] {
    return [...this.#inUse.values(), ...this.#retired.values()];
  }

  isRetired(lease: HeldLease): boolean {
    return this.#retired.has(lease.leaseId);
  }

  /** A retired lease of the account billing has not said closed yet, if any. */
  retiredOf(accountId: string): HeldLease | undefined {
    for (const lease of this.#retired.values()) if (lease.accountId === accountId) return lease;
    return undefined;
  }

  /**
   * The account's retired leases with a call ended since their last report: billing counts its
   * slot until a report says it ended (the heartbeats', or the one a grant sends first).
   */
  endedUnreported(accountId: string): HeldLease[] {
    return [...this.#retired.values()].filter((l) => l.accountId === accountId && l.slotsEndedUnreported());
  }

  /** Requests admitted here and still running. */
  inFlight(): number {
    let n = 0;
    for (const lease of this.#inUse.values()) n += lease.inFlight;
    for (const lease of this.#retired.values()) n += lease.inFlight;
    return n;
  }

  /** The edge admits nothing more on it; it is reported final until billing says closed. */
  retire(lease: HeldLease): void {
    lease.open = false;
    if (this.#inUse.get(lease.accountId) === lease) this.#inUse.delete(lease.accountId);
    this.#retired.set(lease.leaseId, lease);
  }

  /**
   * A lease state from a grant's reply: the account's lease or its replacement. A lease the edge
   * has retired or seen closed never comes back, even when billing answered the grant before the
   * edge's final report reached it: billing closes the lease on that report and holds only the
   * worst cases it counts, so nothing admitted after it would be held: it would settle at cost 0.
   * The caller's admission then finds no lease and asks again, with the final report.
   */
  adopt(state: LeaseState, tier: string, at: ReplyTimes): void {
    const current = this.#inUse.get(state.accountId);
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
    if (current) this.retire(current);
    this.#inUse.set(state.accountId, lease);
  }

  /**
   * A lease state from a heartbeat's reply. A retired lease is forgotten once billing says it
   * closed in reply to a report that counted none of its slots in use, and none is; a fenced one stops admitting at once (its final report goes with the next beat). A
   * lease the edge does not know, open, is one billing made for a grant whose reply was lost: it is
   * retired, to be given back, unless a grant of the account is in flight (`granting`), whose
   * reply is bringing it.
   */
  applyBeat(state: LeaseState, at: ReplyTimes, granting: boolean): void {
    const retired = this.#retired.get(state.leaseId);
    if (retired) {
      // Billing counts a closed lease's slots as the calls it had in flight at its final report
      // until a report says they ended: it is reported (final) every beat until a reply to a
      // report that counted none. Nothing running now is not enough: a call that ended after the
      // beat's send was counted by billing, and forgotten here its slot stayed taken until the
      // lease's release (MAX_REQUEST_MS).
      const told = at.sequence >= retired.lastReportSequence && retired.reportedSlots === 0n;
      if (state.status === LeaseStatus.LEASE_STATUS_CLOSED && told && !retired.slotsInUse()) {
        this.#retired.delete(state.leaseId);
        this.#closed.set(state.leaseId, at.receivedAt);
      }
      return;
    }
    const lease = this.#inUse.get(state.accountId);
    if (lease?.leaseId === state.leaseId) {
      lease.apply(state, at);
      if (!lease.open) this.retire(lease);
      return;
    }
    if (state.status !== LeaseStatus.LEASE_STATUS_CLOSED && !granting) {
      const orphan = new HeldLease(state, "", at.receivedAt);
      orphan.apply(state, at);
      this.retire(orphan);
    }
  }

  /**
   * The reports of a planned heartbeat with `sequence`: the leases it makes final stop admitting
   * first. A report's demand is what its lease admitted over `elapsedMs`, since the last beat; what
   * it lets billing take back (spare slots, an idle lease's credit) is pinned until a reply, so it
   * is not taken here meanwhile.
   */
  reportInBeat(plan: HeartbeatPlan, sequence: bigint, elapsedMs: number): LeaseReport[] {
    for (const lease of plan.retire) this.retire(lease);
    return plan.reports.map(({ lease, final, nextWindow, keepSpareCredit }) => {
      lease.pin(sequence, keepSpareCredit);
      const report = lease.report(final, elapsedMs, sequence, nextWindow);
      lease.resetDemand();
      return { ...report, slotsPinned: true, keepSpareCreditMicros: keepSpareCredit };
    });
  }

  /**
   * A heartbeat's reply, sent at `at.sentAt`: the leases it lists take billing's word
   * (applyBeat); the ones the beat did not report and billing did not list are extended by the
   * session alone, if they were valid at the send (so billing's session covered them throughout):
   * a lease past its validity was reported, and only billing's answer may revive it.
   */
  applyBeatReply(
    listed: readonly LeaseState[],
    validForMs: number,
    unreported: readonly HeldLease[],
    at: ReplyTimes,
    granting: (accountId: string) => boolean,
  ): void {
    for (const state of listed) this.applyBeat(state, at, granting(state.accountId));
    const ids = new Set(listed.map((state) => state.leaseId));
    for (const lease of unreported) {
      if (!ids.has(lease.leaseId) && lease.usable(at.sentAt)) lease.extend(at.sentAt, validForMs, at.marginMs);
    }
    this.forgetClosed(at.sentAt);
  }

  /** Shutdown: every lease's final report (with `sequence`); none admits any more. */
  returnAll(sequence: bigint, elapsedMs: number): LeaseReport[] {
    const all = this.all();
    const reports = all.map((lease) => lease.report(true, elapsedMs, sequence));
    for (const lease of all) this.retire(lease);
    return reports;
  }

  /** The lease a recall names, in use or retired. */
  find(leaseId: string): HeldLease | undefined {
    for (const lease of this.#inUse.values()) if (lease.leaseId === leaseId) return lease;
    return this.#retired.get(leaseId);
  }

  /**
   * A recall of the whole lease (`subscriptionId` '') or of one subscription's budget in it: it
   * admits nothing more there from now on, and the returned report (with `sequence`, the recall
   * ack's) carries the totals billing closes it with, final for a whole lease. A dropped budget
   * remembers the ack's sequence: a reply to a call sent before it never reopens the budget.
   */
  recall(lease: HeldLease, subscriptionId: string, sequence: bigint, elapsedMs: number): LeaseReport {
    if (subscriptionId) {
      const budget = lease.budgets.get(subscriptionId);
      if (budget) {
        budget.open = false;
        budget.recalledAt = sequence;
      }
      return lease.report(false, elapsedMs, sequence);
    }
    this.retire(lease);
    return lease.report(true, elapsedMs, sequence);
  }

  /** Closed ids older than FORGET_CLOSED_MS at `now` are forgotten. */
  forgetClosed(now: number): void {
    for (const [id, at] of this.#closed) if (now - at > FORGET_CLOSED_MS) this.#closed.delete(id);
  }

  /** Every lease is gone: returned at shutdown, or closed by billing for another process. */
  clear(): void {
    this.#inUse.clear();
    this.#retired.clear();
  }
}
