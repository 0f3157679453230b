import {
  LeaseResource,
  LeaseStatus,
  type AllowanceReport,
  type BudgetTerms,
  type LeaseNeed,
  type LeaseReport,
  type LeaseRoom,
  type LeaseState,
} from "@mkt/proto/billing/v1/leases";

/**
 * One allowance of a lease as the edge spends it. `granted` is billing's cumulative total,
 * `admitted` the edge's (for SLOTS both are "now": slots lent, requests in flight). Times are on
 * the edge's monotonic clock (ms).
 */
export interface Room {
  allowanceId: string;
  resource: LeaseResource;
  granted: bigint;
  admitted: bigint;
  /** Next window's room: usable from receive time + starts_in_ms + margin (−∞ when current). */
  usableFrom: number;
  /** Send time + valid_for_ms − margin: never trusted past the point billing's clock could be at. */
  validUntil: number;
  /** Send time + ends_in_ms − margin: a session-only extension stops here (∞: no window end). */
  windowEndsAt: number;
}

export interface Budget {
  subscriptionId: string;
  /** False once billing fenced it or the edge dropped it on a recall: admit only after a new grant. */
  open: boolean;
  /**
   * The sequence of the recall ack that dropped it: a reply to a call sent before (which billing
   * may have answered before its fence) never reopens it.
   */
  recalledAt?: bigint;
  state: string;
  /** The subscription's terms snapshot (prices, plan caps), as billing last sent it. */
  terms: BudgetTerms | undefined;
  rooms: Room[];
  /** Requests and worst-case tokens admitted on it since the last heartbeat (its demand). */
  demand: { requests: bigint; tokens: bigint };
}

/** A spend-limited key's budget: its limit and KEY_CREDIT room in its current window. */
export interface KeyBudget {
  keyId: string;
  limitMicros: bigint;
  /** daily | weekly | monthly | never */
  limitReset: string;
  /** False once billing no longer lists it (its limit was cleared): kept only for its rooms' report. */
  listed: boolean;
  rooms: Room[];
}

/** When billing's reply to a call was sent and received, on the edge's monotonic clock. */
export interface ReplyTimes {
  sequence: bigint;
  sentAt: number;
  receivedAt: number;
  marginMs: number;
}

/** The edge's copy of one lease (docs/leases.md), changed only by admission, release and replies. */
export class HeldLease {
  readonly leaseId: string;
  readonly accountId: string;
  readonly tier: string;
  /** The account tier's requests per minute, as billing last said (0 until a reply). */
  limitPerMinute = 0n;
  open = true;
  /**
   * A final report of it has gone to billing, which closes it on that report and holds only what
   * the report counts: the edge never admits on it again, whatever a reply sent earlier says.
   */
  finalSent = false;
  validUntil = -Infinity;
  credit: Room | undefined;
  rooms: Room[] = [];
  readonly budgets = new Map<string, Budget>();
  /**
   * The account's spend-limited keys as billing last listed them: a request on one of them takes
   * its worst case from its room as well as from the credit. A key not listed has no limit (a
   * limit's change fences the lease, so the list is never stale on an open lease).
   */
  keyBudgets = new Map<string, KeyBudget>();
  /** The sequence of the last reply applied: an older reply arriving late changes nothing. */
  lastReplySequence = 0n;
  /** Tickets not released yet (requests admitted here whose relay has not ended). */
  inFlight = 0;
  lastAdmittedAt: number;
  /** Credit and requests admitted since the last heartbeat that reported it (its demand). */
  demand = { credit: 0n, requests: 0n };
  /** The demand of its last report that had any (a report at a window's end asks by it). */
  lastDemand: { account: LeaseNeed; budgets: LeaseNeed[] } | undefined;
  /**
   * Admission or a release changed what its report says since its last report: a heartbeat
   * carries only leases that changed (or have room to give back, or lapsed).
   */
  changed = false;
  /** The sequence of the last call that carried its report (a reply to it acknowledges it). */
  lastReportSequence = 0n;
  /** Its calls in flight (slots in use) as its last report counted them. */
  reportedSlots = 0n;
  /** The largest credit worst case taken on it: what it keeps spare once idle. */
  largestWorstCase = 0n;
  /**
   * A report lets billing take back room beyond what it says (slots beyond the requests in
   * flight; an idle lease's credit beyond its kept spare), so from its send until a reply to it
   * (or a later call) is applied, no more of those allowances is taken than it allowed: `caps`
   * by allowance id. Kept when its reply is lost: billing may have applied it all the same.
   */
  pinned: { sequence: bigint; caps: Map<string, bigint> } | undefined;
  /** The margin of the last reply applied (a tenth of billing's TTL): demand is measured over 5 of them at least. */
  #marginMs = 0;

  constructor(state: LeaseState, tier: string, createdAt: number) {
    this.leaseId = state.leaseId;
    this.accountId = state.accountId;
    this.tier = tier;
    this.lastAdmittedAt = createdAt;
  }

  /**
   * Pins what a report about to be sent with `sequence` lets billing take back: the slots in
   * flight, and with `keepSpareCredit` the credit admitted plus that. A credit cap of an earlier
   * report not answered yet stays (billing may have applied it).
   */
  pin(sequence: bigint, keepSpareCredit?: bigint): void {
    const caps = new Map<string, bigint>();
    for (const budget of this.budgets.values()) {
      for (const r of budget.rooms)
        if (r.resource === LeaseResource.LEASE_RESOURCE_SLOTS) caps.set(r.allowanceId, r.admitted);
    }
    if (this.credit) {
      const earlier = this.pinned?.caps.get(this.credit.allowanceId);
      const asked = keepSpareCredit === undefined ? undefined : this.credit.admitted + keepSpareCredit;
      const cap = earlier === undefined || (asked !== undefined && asked < earlier) ? asked : earlier;
      if (cap !== undefined) caps.set(this.credit.allowanceId, cap);
    }
    this.pinned = { sequence, caps };
  }

  /** Room left in an allowance now (granted minus admitted, within a pending report's caps). */
  spare(room: Room): bigint {
    const pinned = this.pinned?.caps.get(room.allowanceId);
    const granted = pinned !== undefined && pinned < room.granted ? pinned : room.granted;
    return granted - room.admitted;
  }

  /**
   * A heartbeat reply that does not list the lease: billing extended it by the edge's session
   * alone (nothing of it changed there), so it is valid until the heartbeat's send time +
   * `validForMs` − margin, and each room as long, never past its window's end.
   */
  extend(sentAt: number, validForMs: number, marginMs: number): void {
    if (!this.open) return;
    const until = sentAt + validForMs - marginMs;
    if (until > this.validUntil) this.validUntil = until;
    const rooms = [...(this.credit ? [this.credit] : []), ...this.rooms];
    for (const budget of this.budgets.values()) if (budget.open) rooms.push(...budget.rooms);
    for (const key of this.keyBudgets.values()) if (key.listed) rooms.push(...key.rooms);
    for (const room of rooms) {
      const roomUntil = Math.min(until, room.windowEndsAt);
      if (roomUntil > room.validUntil) room.validUntil = roomUntil;
    }
  }

  /**
   * Takes billing's view: granted totals, validity, status, new rooms and budgets. The edge keeps
   * its own admitted totals (billing's are at most as recent); rooms billing no longer lists
   * belong to windows that ended, so they go. Returns false when the reply was older than one
   * already applied.
   */
  apply(state: LeaseState, at: ReplyTimes): boolean {
    if (at.sequence <= this.lastReplySequence) {
      this.#absorbGrowth(state);
      return false;
    }
    this.lastReplySequence = at.sequence;
    this.#marginMs = at.marginMs;
    if (state.limitPerMinute > 0n) this.limitPerMinute = state.limitPerMinute;
    if (this.pinned && at.sequence >= this.pinned.sequence) this.pinned = undefined;
    this.open &&= !this.finalSent && state.status === LeaseStatus.LEASE_STATUS_OPEN;
    this.validUntil = this.open ? at.sentAt + Number(state.validForMs) - at.marginMs : -Infinity;
    this.credit = state.credit ? mergeRooms(this.credit ? [this.credit] : [], [state.credit], at)[0] : undefined;
    this.rooms = mergeRooms(this.rooms, state.rooms, at);
    for (const b of state.budgets) {
      const held = this.budgets.get(b.subscriptionId);
      const recalledAt = held?.recalledAt;
      const open =
        this.open &&
        b.status === LeaseStatus.LEASE_STATUS_OPEN &&
        (recalledAt === undefined || at.sequence > recalledAt);
      this.budgets.set(b.subscriptionId, {
        subscriptionId: b.subscriptionId,
        open,
        recalledAt,
        state: b.state,
        terms: b.terms ?? held?.terms,
        rooms: mergeRooms(held?.rooms ?? [], b.rooms, at),
        demand: held?.demand ?? { requests: 0n, tokens: 0n },
      });
    }
    const keyBudgets = new Map<string, KeyBudget>();
    for (const k of state.keyBudgets) {
      const held = this.keyBudgets.get(k.keyId);
      keyBudgets.set(k.keyId, { ...k, listed: true, rooms: mergeRooms(held?.rooms ?? [], k.rooms, at) });
    }
    // A key billing no longer lists keeps its rooms for the report: their admitted totals are what
    // billing holds once the lease closes.
    for (const [keyId, held] of this.keyBudgets) {
      if (!keyBudgets.has(keyId) && held.rooms.length > 0) keyBudgets.set(keyId, { ...held, listed: false });
    }
    this.keyBudgets = keyBudgets;
    return true;
  }

  /**
   * A reply older than one already applied (a grant answered after a later heartbeat's reply)
   * changes nothing but what it grew: `granted` is cumulative, so the larger is right whichever
   * reply came last. Slots are lent "now", not cumulative, and validity and status follow the
   * latest reply only.
   */
  #absorbGrowth(state: LeaseState): void {
    const mine = this.#allRooms();
    const theirs = [
      ...(state.credit ? [state.credit] : []),
      ...state.rooms,
      ...state.budgets.flatMap((b) => b.rooms),
      ...state.keyBudgets.flatMap((k) => k.rooms),
    ];
    for (const r of theirs) {
      if (r.resource === LeaseResource.LEASE_RESOURCE_SLOTS) continue;
      const room = mine.find((m) => m.allowanceId === r.allowanceId);
      if (room && r.granted > room.granted) room.granted = r.granted;
    }
  }

  /** The budget of the account's subscription to a plan (an open endpoint's), open or not. */
  budgetOfPlan(productId: string): Budget | undefined {
    for (const budget of this.budgets.values()) if (budget.terms?.productId === productId) return budget;
    return undefined;
  }

  /** Every allowance with the edge's cumulative admitted total (credit, account rooms, budgets'). */
  admittedTotals(): AllowanceReport[] {
    return this.#allRooms().map((r) => ({ allowanceId: r.allowanceId, admitted: r.admitted }));
  }

  #allRooms(): Room[] {
    const all = [...(this.credit ? [this.credit] : []), ...this.rooms];
    for (const budget of this.budgets.values()) all.push(...budget.rooms);
    for (const key of this.keyBudgets.values()) all.push(...key.rooms);
    return all;
  }

  /**
   * The report a call with `sequence` carries: cumulative totals and demand per second over
   * `elapsedMs` (rounded up, so any demand asks for at least one unit). `final`: the edge
   * admits nothing more on it. `nextWindow`: sent ahead of the end of a window it used, for the
   * next one's room, so with no new demand it asks by its last demand (requests and tokens:
   * credit has no window).
   */
  report(final: boolean, elapsedMs: number, sequence: bigint, nextWindow = false): LeaseReport {
    // Measured over half a TTL at least (the heartbeats' interval; the margin is a tenth of the
    // TTL): a grant sent a millisecond after a beat, with one request in hand, asked for a
    // thousand a second, and billing lent it the window's whole room (a plan's 600 rpm for one
    // request). That room stays counted when the edge dies, so a restarted edge's subscriber was
    // refused 429 for the rest of the minute.
    const ms = BigInt(Math.max(1, Math.round(elapsedMs), 5 * this.#marginMs));
    this.changed = false;
    if (sequence > this.lastReportSequence) this.lastReportSequence = sequence;
    this.reportedSlots = this.slotsInFlight();
    if (final) {
      this.finalSent = true;
      this.open = false;
    }
    const perSecond = (n: bigint) => (n * 1000n + ms - 1n) / ms;
    const need = (credit: bigint, requests: bigint, tokens: bigint, subscriptionId: string): LeaseNeed => ({
      creditMicros: perSecond(credit),
      requests: perSecond(requests),
      tokens: perSecond(tokens),
      subscriptionId,
      keyId: "",
    });
    let account = need(this.demand.credit, this.demand.requests, 0n, "");
    let budgets = [...this.budgets.values()]
      .filter((b) => b.open)
      .map((b) => need(0n, b.demand.requests, b.demand.tokens, b.subscriptionId));
    if (account.requests > 0n) this.lastDemand = { account, budgets };
    else if (nextWindow && this.lastDemand) {
      account = { ...this.lastDemand.account, creditMicros: 0n };
      budgets = this.lastDemand.budgets.filter((d) => this.budgets.get(d.subscriptionId)?.open);
    }
    return {
      leaseId: this.leaseId,
      admitted: this.admittedTotals(),
      final,
      demandPerSecond: account,
      budgetDemand: budgets,
      // Set by the caller that pinned the slots for this very report (pin).
      slotsPinned: false,
      nextWindow,
    };
  }

  resetDemand(): void {
    this.demand = { credit: 0n, requests: 0n };
    for (const budget of this.budgets.values()) budget.demand = { requests: 0n, tokens: 0n };
  }

  /**
   * A room of a minute or day window used in it and ending within `withinMs`, with no room of
   * the next window yet: the lease must ask for the next window's room before the boundary (a
   * request in the new window would otherwise go to billing).
   */
  windowEnding(now: number, withinMs: number): boolean {
    const windowed = (rooms: readonly Room[]) =>
      rooms.some(
        (r) =>
          r.resource !== LeaseResource.LEASE_RESOURCE_SLOTS &&
          r.resource !== LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS &&
          r.resource !== LeaseResource.LEASE_RESOURCE_KEY_CREDIT &&
          r.admitted > 0n &&
          now < r.windowEndsAt &&
          r.windowEndsAt - now <= withinMs &&
          !rooms.some((next) => next.resource === r.resource && next.windowEndsAt > r.windowEndsAt),
      );
    if (windowed(this.rooms)) return true;
    for (const budget of this.budgets.values()) if (budget.open && windowed(budget.rooms)) return true;
    return false;
  }

  /** Slots lent to an open budget beyond its requests in flight: a report gives them back. */
  slotsToReturn(): boolean {
    for (const budget of this.budgets.values()) {
      for (const r of budget.rooms)
        if (r.resource === LeaseResource.LEASE_RESOURCE_SLOTS && r.granted > r.admitted) return true;
    }
    return false;
  }

  /** A call admitted on one of its budgets is still running (its slot not released). */
  slotsInUse(): boolean {
    return this.slotsInFlight() > 0n;
  }

  /** Calls admitted on its budgets and still running: the slots they hold. */
  slotsInFlight(): bigint {
    let n = 0n;
    for (const budget of this.budgets.values()) {
      for (const r of budget.rooms) if (r.resource === LeaseResource.LEASE_RESOURCE_SLOTS) n += r.admitted;
    }
    return n;
  }

  /**
   * A call on one of its budgets ended since its last report: billing still counts that slot
   * (a closed lease's slots are the calls its last report had in flight) until a report says so.
   */
  slotsEndedUnreported(): boolean {
    return this.slotsInFlight() < this.reportedSlots;
  }

  /** Usable now: open and within its validity. */
  usable(now: number): boolean {
    return this.open && now < this.validUntil;
  }
}

/**
 * Billing's rooms with the edge's admitted totals carried over by allowance id. A room billing
 * still lists stays the same object: a ticket holding its slot gives it back to that object.
 */
function mergeRooms(held: Room[], rooms: readonly LeaseRoom[], at: ReplyTimes): Room[] {
  return rooms.map((r) => {
    const startsIn = Number(r.startsInMs);
    const endsIn = Number(r.endsInMs);
    const fresh = {
      allowanceId: r.allowanceId,
      resource: r.resource,
      granted: r.granted,
      usableFrom: startsIn > 0 ? at.receivedAt + startsIn + at.marginMs : -Infinity,
      validUntil: at.sentAt + Number(r.validForMs) - at.marginMs,
      windowEndsAt: endsIn > 0 ? at.sentAt + endsIn - at.marginMs : Infinity,
    };
    const mine = held.find((h) => h.allowanceId === r.allowanceId);
    return mine ? Object.assign(mine, fresh) : { ...fresh, admitted: 0n };
  });
}
