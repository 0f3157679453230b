import { LeaseResource } from "@mkt/proto/billing/v1/leases";
import { chargesOverage, stopsAtIncludedTokens } from "@mkt/runtime/pricing-models";
import type { HeldLease, Room } from "./held-lease.ts";
import type { FitToCredit, WorstCase } from "./admission-need.ts";
import type { ScopeKey } from "./scope-key.ts";

/**
 * A request admitted on a lease: its request room (and slot) taken first, its worst case after
 * the prompt is counted (docs/architecture.md#admission-on-a-lease). Its usage event names the
 * lease and the worst case, which settlement checks the charge against.
 */
export interface Ticket {
  /** The lease holding its worst case (moved once if its first lease is recalled in between). */
  lease: HeldLease;
  /** Its subscription's budget ('' for the account's own); an open request's moves on failover. */
  subscriptionId: string;
  /** The API key it was made with: a spend-limited key's worst case is taken from its room too. */
  readonly keyId: string;
  /** The slot this request holds in its subscription's budget, returned by `release`. */
  slot: Room | undefined;
  worstCaseMicros: bigint;
  worstCaseTokens: bigint;
  /**
   * The included tokens it took from its subscription's budget (of its worst case's tokens): an
   * overage plan's other tokens are overage, the split its cost is computed with (docs/adr/0017-one-cost-function.md).
   */
  includedTokens: bigint;
  /** The output cap per choice its worst case was taken for (the relay request carries it). */
  maxOutputTokens: bigint;
  released: boolean;
}

/** What an attempt to admit from memory found: done, wait this long for a window, or short. */
export type Attempt<T> = { ok: T } | { waitMs: number } | { short: true };

/**
 * A request whose window's room is used up waits this long at most for the next window's room
 * (it does not go to billing); longer, billing is asked to grow the current one.
 */
export const WINDOW_GAP_MS = 250;

/**
 * The room of `resource` usable now with `n` to spare, the wait until the next window's room
 * that will have it, or undefined when neither.
 *
 * Between windows no room of the resource is valid at all: the current window's ends a margin
 * before billing's boundary and the next one's starts a margin (plus the reply's round trip)
 * after it, a gap of twice the margin (docs/leases.md#the-path-of-a-chat-request; with a 2 s TTL about
 * 0.4 s). A request arriving in it waits for the next window's room however long the gap is:
 * billing cannot admit it sooner (it sends the next window's room only within one TTL of the
 * boundary, so the wait is bounded by that), and sending it to billing instead only brings the
 * same rooms back, until the request gives up with a 503 at every boundary.
 */
function pick(
  lease: HeldLease,
  rooms: readonly Room[],
  resource: LeaseResource,
  n: bigint,
  now: number,
): { room: Room } | { waitMs: number } | undefined {
  const between = !rooms.some((r) => r.resource === resource && r.usableFrom <= now && now < r.validUntil);
  let wait: number | undefined;
  for (const room of rooms) {
    if (room.resource !== resource || lease.spare(room) < n || now >= room.validUntil) continue;
    if (room.usableFrom <= now) return { room };
    const ms = room.usableFrom - now;
    if ((between || ms <= WINDOW_GAP_MS) && (wait === undefined || ms < wait)) wait = ms;
  }
  return wait === undefined ? undefined : { waitMs: wait };
}

/** Picks every room or none: the first missing one decides (a wait, or short). */
function pickAll(
  lease: HeldLease,
  wanted: Array<[readonly Room[], LeaseResource, bigint]>,
  now: number,
): Attempt<Room[]> {
  const rooms: Room[] = [];
  for (const [from, resource, n] of wanted) {
    const found = pick(lease, from, resource, n, now);
    if (!found) return { short: true };
    if ("waitMs" in found) return { waitMs: found.waitMs };
    rooms.push(found.room);
  }
  return { ok: rooms };
}

/**
 * Step one of admission, on one lease in memory: one request in the account's minute and day rooms and, on a
 * subscription's key, one in its budget's minute and one of its slots. All or nothing.
 */
export function takeRequest(lease: HeldLease, subscriptionId: string, now: number, keyId = ""): Attempt<Ticket> {
  if (!lease.usable(now)) return { short: true };
  const wanted: Array<[readonly Room[], LeaseResource, bigint]> = [
    [lease.rooms, LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE, 1n],
    [lease.rooms, LeaseResource.LEASE_RESOURCE_REQUESTS_PER_DAY, 1n],
  ];
  const budget = subscriptionId ? lease.budgets.get(subscriptionId) : undefined;
  if (subscriptionId) {
    if (!budget?.open) return { short: true };
    wanted.push([budget.rooms, LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE, 1n]);
    wanted.push([budget.rooms, LeaseResource.LEASE_RESOURCE_SLOTS, 1n]);
  }
  const picked = pickAll(lease, wanted, now);
  if (!("ok" in picked)) return picked;
  for (const room of picked.ok) room.admitted += 1n;
  lease.inFlight += 1;
  lease.lastAdmittedAt = now;
  lease.changed = true;
  lease.demand.requests += 1n;
  if (budget) budget.demand.requests += 1n;
  const slot = picked.ok.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_SLOTS);
  return {
    ok: {
      lease,
      subscriptionId,
      keyId,
      slot,
      worstCaseMicros: 0n,
      worstCaseTokens: 0n,
      includedTokens: 0n,
      maxOutputTokens: 0n,
      released: false,
    },
  };
}

/**
 * Step one for a scope on the account's lease (none: short): on a subscription's budget, on the
 * budget of the account's subscription to an open endpoint's plan, or on the account alone.
 */
export function takeRequestIn(lease: HeldLease | undefined, key: ScopeKey, now: number): Attempt<Ticket> {
  const budget = key.openProductId ? lease?.budgetOfPlan(key.openProductId) : undefined;
  if (!lease || (key.openProductId && !budget)) return { short: true };
  return takeRequest(lease, budget?.subscriptionId ?? key.subscriptionId, now, key.keyId);
}

/**
 * A plan's room for a request already admitted on the account (an open endpoint's plan, taken
 * when the request moves to it): one request in its minute, one slot and `tokens` of its minute's
 * tokens. All or nothing; the slot taken is returned.
 */
export function takePlanRoom(lease: HeldLease, subscriptionId: string, tokens: bigint, now: number): Attempt<Room> {
  if (!lease.usable(now)) return { short: true };
  const budget = lease.budgets.get(subscriptionId);
  if (!budget?.open) return { short: true };
  const wanted: Array<[readonly Room[], LeaseResource, bigint]> = [
    [budget.rooms, LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE, 1n],
    [budget.rooms, LeaseResource.LEASE_RESOURCE_SLOTS, 1n],
  ];
  if (tokens > 0n) wanted.push([budget.rooms, LeaseResource.LEASE_RESOURCE_TOKENS_PER_MINUTE, tokens]);
  const picked = pickAll(lease, wanted, now);
  if (!("ok" in picked)) return picked;
  for (const [i, room] of picked.ok.entries()) room.admitted += wanted[i]![2];
  budget.demand.requests += 1n;
  budget.demand.tokens += tokens;
  lease.changed = true;
  return { ok: picked.ok[1]! };
}

/** The room of the ticket's key when billing lists it as spend-limited on this lease. */
export function keyBudgetOf(lease: HeldLease, keyId: string) {
  const budget = keyId ? lease.keyBudgets.get(keyId) : undefined;
  return budget?.listed ? budget : undefined;
}

/** Credit the lease can pay now: its own spare, and no more than a spend-limited key's room has. */
export function spareCredit(lease: HeldLease, keyId: string, now: number): bigint {
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

/** What billing's grant for this very request said of its included tokens (none yet: both false). */
export interface IncludedAnswer {
  /** A grant was made for the request: an overage plan then pays what the room lacks. */
  asked: boolean;
  /** The grant let it cross a `subscription` plan's included-token line (included_crossing). */
  crossing: boolean;
}

/**
 * Step two, on one lease in memory: the worst case in credit (and, on a spend-limited key, in its room) and, on a
 * subscription, in tpm and included tokens. A budget that has fewer included tokens than the
 * worst case takes what it has only as `included` allows: on an overage plan once billing was
 * asked, on a `subscription` plan once billing said this request crosses the line (otherwise
 * every edge could serve one crossing request of its own share).
 */
export function takeWorstCaseFromLease(
  ticket: Ticket,
  credit: bigint,
  tokens: bigint,
  now: number,
  included: IncludedAnswer,
): Attempt<Ticket> {
  const { lease } = ticket;
  if (!lease.usable(now)) return { short: true };
  // A request that costs nothing (a free plan's) needs no credit room, and a lease granted only
  // for such requests has none. The credit allowance has no resource of its own (UNSPECIFIED).
  const wanted: Array<[readonly Room[], LeaseResource, bigint]> = [];
  if (credit > 0n) {
    if (!lease.credit) return { short: true };
    wanted.push([[lease.credit], LeaseResource.LEASE_RESOURCE_UNSPECIFIED, credit]);
    const key = keyBudgetOf(lease, ticket.keyId);
    if (key) wanted.push([key.rooms, LeaseResource.LEASE_RESOURCE_KEY_CREDIT, credit]);
  }
  const budget = ticket.subscriptionId ? lease.budgets.get(ticket.subscriptionId) : undefined;
  let taken: { room: Room; take: bigint } | undefined;
  if (ticket.subscriptionId) {
    if (!budget?.open) return { short: true };
    wanted.push([budget.rooms, LeaseResource.LEASE_RESOURCE_TOKENS_PER_MINUTE, tokens]);
    const found = budget.rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS);
    const room = found && found.usableFrom <= now && now < found.validUntil ? found : undefined;
    const spare = room ? lease.spare(room) : 0n;
    // A `subscription` plan admits while any included tokens are left, and the request crossing
    // the line is served in full; an overage plan pays what its included room does not cover
    // from credit. Either takes less than its worst case only once billing was asked.
    const pricing = budget.terms?.pricingModel ?? "";
    if (room && spare >= tokens) taken = { room, take: tokens };
    else if (stopsAtIncludedTokens(pricing) && !(included.crossing && room && spare > 0n)) return { short: true };
    else if (chargesOverage(pricing) && !included.asked) return { short: true };
    else if (room && spare > 0n) taken = { room, take: spare };
  }
  const picked = pickAll(lease, wanted, now);
  if (!("ok" in picked)) return picked;
  for (const [i, room] of picked.ok.entries()) room.admitted += wanted[i]![2];
  if (taken) taken.room.admitted += taken.take;
  lease.demand.credit += credit;
  lease.changed = true;
  if (credit > lease.largestWorstCase) lease.largestWorstCase = credit;
  if (budget) budget.demand.tokens += tokens;
  ticket.worstCaseMicros = credit;
  ticket.worstCaseTokens = tokens;
  ticket.includedTokens = taken?.take ?? 0n;
  return { ok: ticket };
}

/**
 * Step two on `lease`, the account's lease now: the ticket's own or, for an account key's ticket
 * whose lease was recalled between the steps, the next one (the ticket then moves to it with its
 * request in flight). The worst case is `want`; with `fit` (a request without max_tokens) and once
 * billing was asked, what the lease's spare credit pays, which is then all the account has.
 */
export function takeWorstCaseOn(
  ticket: Ticket,
  lease: HeldLease,
  want: WorstCase,
  fit: FitToCredit | undefined,
  included: IncludedAnswer,
  now: number,
): Attempt<Ticket> {
  const spare = spareCredit(lease, ticket.keyId, now);
  const sized = spare >= want.credit || !fit || !included.asked ? want : fit.shrink(spare);
  if (!sized) return { short: true };
  const moved = lease === ticket.lease ? ticket : { ...ticket, lease };
  const attempt = takeWorstCaseFromLease(moved, sized.credit, sized.tokens, now, included);
  if (!("ok" in attempt)) return attempt;
  if (moved !== ticket) {
    ticket.lease.inFlight -= 1;
    lease.inFlight += 1;
    Object.assign(ticket, moved);
  }
  ticket.maxOutputTokens = sized.maxOutputTokens;
  return { ok: ticket };
}
