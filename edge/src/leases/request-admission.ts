import type { AdmitNeed, FitToCredit, InHand, WorstCase, WorstCaseOn } from "./admission-need.ts";
import type { HeldLease } from "./held-lease.ts";
import {
  takePlanRoom,
  takeRequestIn,
  takeWorstCaseFromLease,
  takeWorstCaseOn,
  type Attempt,
  type Ticket,
} from "./lease-admission.ts";
import { LeaseGone, unavailable } from "./lease-errors.ts";
import { supersededError } from "./edge-incarnation.ts";
import { scopeKey, type ScopeKey } from "./scope-key.ts";

/** What a request's admission reads and calls, owned by the lease table. */
export interface AdmissionPort {
  ttlMs: number;
  now(): number;
  /** Another process took this edge's id: nothing is admitted. */
  superseded(): boolean;
  inUse(accountId: string): HeldLease | undefined;
  /** Tries `attempt` in memory until it admits, asking billing when short (admit-or-grant.ts). */
  admitting(
    key: ScopeKey,
    tier: string,
    inHand: InHand,
    attempt: (crossing: boolean) => Attempt<Ticket>,
  ): Promise<Ticket>;
}

/**
 * Step one of a request's admission (docs/leases.md#the-path-of-a-chat-request): one request
 * (and, on a subscription or an open plan, one slot), before the prompt is counted. A cold
 * request asks for its known worst case (`atLeast`) in the same grant.
 */
export async function admitRequest(port: AdmissionPort, need: AdmitNeed): Promise<Ticket> {
  if (port.superseded()) throw supersededError();
  const key = scopeKey(need.accountId, need);
  const { credit = 0n, tokens = 0n } = need.atLeast ?? {};
  const inHand = { requests: 1n, credit, tokens, minCredit: 0n, likelyCredit: need.likelyCredit ?? 0n };
  return port.admitting(key, need.tier, inHand, () => takeRequestIn(port.inUse(key.accountId), key, port.now()));
}

/**
 * Moves an admitted request to an open endpoint's plan (before its first byte: failover, or a
 * first endpoint the prompt did not fit): one request in that plan's minute, one of its slots and
 * the request's worst-case tokens, from memory or with one grant; the slot of the budget it
 * leaves goes back. Its request in the old plan's minute stays counted (billing's windows only
 * ever grow). Refusals are the new plan's (paused, cancelled, its limits).
 */
export async function moveToPlan(port: AdmissionPort, ticket: Ticket, productId: string): Promise<void> {
  const { accountId, tier } = ticket.lease;
  const key = scopeKey(accountId, { keyId: ticket.keyId, openProductId: productId });
  const inHand = { requests: 1n, credit: 0n, tokens: ticket.worstCaseTokens, minCredit: 0n, likelyCredit: 0n };
  const moved = await port.admitting(key, tier, inHand, () => {
    const lease = port.inUse(accountId);
    if (lease !== ticket.lease) throw unavailable(port.ttlMs, "The request's lease was recalled");
    const budget = lease.budgetOfPlan(productId);
    if (!budget) return { short: true };
    const taken = takePlanRoom(lease, budget.subscriptionId, ticket.worstCaseTokens, port.now());
    return "ok" in taken ? { ok: { ...ticket, subscriptionId: budget.subscriptionId, slot: taken.ok } } : taken;
  });
  if (ticket.slot) ticket.slot.admitted -= 1n;
  ticket.slot = moved.slot;
  ticket.subscriptionId = moved.subscriptionId;
}

/**
 * Step two, once the prompt is counted: the worst case in credit (micro-USD) and tokens. With
 * `fit` (a request without max_tokens) a smaller worst case is taken when the account cannot pay
 * `wanted`: the grant then covers what the whole account has left (at least `fit.min`) and
 * `fit.shrink` sizes the request to the lease's spare credit. A subscription's ticket whose lease
 * was recalled meanwhile starts again on the account's next lease, once: its slot cannot move
 * (its first request stays counted in the old lease's final report: one extra that minute).
 */
export async function takeWorstCase(
  port: AdmissionPort,
  ticket: Ticket,
  wanted: WorstCase | WorstCaseOn,
  fit?: FitToCredit,
): Promise<Ticket> {
  try {
    return await takeWorstCaseOnce(port, ticket, wanted, fit);
  } catch (err) {
    if (!(err instanceof LeaseGone)) throw err;
    release(ticket);
    const { accountId, tier } = ticket.lease;
    const fresh = await admitRequest(port, {
      accountId,
      tier,
      subscriptionId: ticket.subscriptionId,
      keyId: ticket.keyId,
    });
    try {
      return await takeWorstCaseOnce(port, fresh, wanted, fit);
    } catch (freshErr) {
      release(fresh);
      throw freshErr instanceof LeaseGone ? unavailable(port.ttlMs, "The request's lease was recalled") : freshErr;
    }
  }
}

function takeWorstCaseOnce(port: AdmissionPort, ticket: Ticket, wanted: WorstCase | WorstCaseOn, fit?: FitToCredit) {
  const { accountId, tier } = ticket.lease;
  const { subscriptionId, keyId } = ticket;
  const worstCaseOn = typeof wanted === "function" ? wanted : () => wanted;
  const { credit, tokens } = worstCaseOn(ticket.lease);
  const inHand = { requests: 0n, credit, tokens, minCredit: fit?.min ?? 0n, likelyCredit: 0n };
  let granted = false;
  return port.admitting(scopeKey(accountId, { subscriptionId, keyId }), tier, inHand, (crossing) => {
    const lease = port.inUse(accountId);
    // Recalled or lapsed between the two steps: its final report counted this request. An
    // account key's worst case is credit alone, so it moves to the account's current lease.
    if (lease !== ticket.lease && subscriptionId) throw new LeaseGone();
    if (!lease) return { short: true };
    const included = { asked: granted, crossing };
    granted = true;
    return takeWorstCaseOn(ticket, lease, worstCaseOn(lease), fit, included, port.now());
  });
}

/**
 * Step two from memory only: the worst case is taken when the ticket's lease has the room for it
 * now; otherwise nothing is taken, billing is not asked, and the result is undefined. For a worst
 * case computed on a bound, which the caller would rather make exact than have billing cover the
 * difference.
 */
export function takeWorstCaseInMemory(port: AdmissionPort, ticket: Ticket, wanted: WorstCase): Ticket | undefined {
  if (port.inUse(ticket.lease.accountId) !== ticket.lease) return undefined;
  const included = { asked: false, crossing: false };
  const attempt = takeWorstCaseFromLease(ticket, wanted.credit, wanted.tokens, port.now(), included);
  if (!("ok" in attempt)) return undefined;
  ticket.maxOutputTokens = wanted.maxOutputTokens;
  return attempt.ok;
}

/** The request's relay ended: its slot goes back to the lease (no call to billing). */
export function release(ticket: Ticket): void {
  if (ticket.released) return;
  ticket.released = true;
  ticket.lease.inFlight -= 1;
  if (ticket.slot) ticket.slot.admitted -= 1n;
}
