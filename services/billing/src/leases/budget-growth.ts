import { max0 } from "@mkt/runtime/bigint-math";
import { hasIncludedTokens, stopsAtIncludedTokens } from "@mkt/runtime/pricing-models";
import type { BillingContext, Em } from "../context.ts";
import { int8 } from "../context.ts";
import { write } from "../write-batch.ts";
import {
  concurrencyRefusal,
  includedTokensRefusal,
  planTerms,
  requestRateRefusal,
  tokenRateRefusal,
  type PlanTerms,
} from "../subscriptions/plan-limits.ts";
import { growthFor } from "./lease-sizing.ts";
import { addRoom, sameTime, unspent, type Step } from "./lease-growth.ts";
import type { AllowanceRow, LeaseRow } from "./lease-rows.ts";
import { setGranted } from "./lease-writes.ts";
import { windowsOf } from "./lease-windows.ts";

/** A budget's need in its own units: requests (and slots), worst-case tokens. */
export interface BudgetAmounts {
  requests: bigint;
  tokens: bigint;
}

const MINUTE = { lengthMs: 60_000 };

/**
 * Grows a subscription's budget in the lease by the sizing rule, each resource with `left` what
 * is free for the subscription (docs/leases.md#how-much-room-an-edge-gets): plan rpm and tpm in the current UTC minute
 * (counted in `subscription_rate_counters` at grant, so the sum over every lease never passes the
 * plan's limit), the period's included tokens (subscription kinds), and `max_concurrent` slots.
 * `inHand` must be covered or the request is refused with the plan's 429s or
 * included_tokens_exhausted (the caller's transaction rolls back). Slots are not
 * cumulative: a heartbeat (`returnIdleSlots`) first takes back those beyond the requests in flight.
 * `includedCrossing`: the request in hand is the one a `subscription` plan serves across the end
 * of its included tokens, with the room that is left (GrantLeaseResponse.included_crossing).
 */
export async function growBudget(
  ctx: BillingContext,
  em: Em,
  lease: LeaseRow,
  subscription: Record<string, unknown>,
  growth: {
    inHand: BudgetAmounts;
    demandPerSecond: BudgetAmounts;
    returnIdleSlots: boolean;
    /** As Growth.nextWindowAheadMs: how far ahead of the minute's end the next one's room is granted. */
    nextWindowAheadMs?: number;
  },
  now: Date,
): Promise<{ includedCrossing: boolean }> {
  const plan = planTerms(subscription);
  const scope = plan.subscriptionId;
  const ttlMs = ctx.config.LEASE_TTL_MS;
  const edges = await edgesUsingSubscription(em, lease, scope, now, ttlMs);
  const mine = (resource: string, start: Date | null) =>
    lease.allowances.find(
      (a) => a.scope === scope && a.resource === resource && (start ? sameTime(a.windowStart, start) : !a.windowStart),
    );
  const size = (left: bigint, allowance: AllowanceRow | undefined, demand: bigint, inHand: bigint) =>
    growthFor({ left, edges, demandPerSecond: demand, inHand, ttlMs }, unspent(allowance));
  const { inHand, demandPerSecond: demand } = growth;
  const steps: Step[] = [];
  let includedCrossing = false;

  // rpm and tpm: the current minute, and the next one's room only with demand or a request in
  // hand (as the account's: near the boundary the edge can only admit the request on it).
  const { current, next } = windowsOf(MINUTE, now, growth.nextWindowAheadMs ?? ttlMs);
  const resetSeconds = Math.max(1, Math.ceil((current.end.getTime() - now.getTime()) / 1000));
  const ahead = next && (demand.requests > 0n || inHand.requests > 0n || inHand.tokens > 0n);
  for (const span of ahead ? [current, next] : [current]) {
    const used = await minuteCounts(em, scope, span.start);
    const rpm = mine("sub_requests_minute", span.start);
    const tpm = mine("sub_tokens_minute", span.start);
    // The request in hand is refused only by the current minute; the next one's room is sized for it.
    const w = span === current ? inHand : { requests: 0n, tokens: 0n };
    const rpmLeft = plan.rpmLimit - used.requests;
    if (w.requests > 0n && w.requests > rpmLeft + unspent(rpm)) throw requestRateRefusal(plan.rpmLimit, resetSeconds);
    const tpmLeft = plan.tpmLimit - used.tokens;
    if (w.tokens > 0n && w.tokens > tpmLeft + unspent(tpm)) {
      throw tokenRateRefusal(plan.tpmLimit, tpmLeft + unspent(tpm), w.tokens, resetSeconds);
    }
    const base = { scope, span };
    steps.push({ ...base, resource: "sub_requests_minute", add: size(rpmLeft, rpm, demand.requests, inHand.requests) });
    steps.push({ ...base, resource: "sub_tokens_minute", add: size(tpmLeft, tpm, demand.tokens, inHand.tokens) });
  }

  if (hasIncludedTokens(plan.pricingModel)) {
    const period = periodOf(subscription);
    const included = mine("included_tokens", period.start);
    const left = await includedLeft(em, plan, period.start);
    const room = left + unspent(included);
    // A `subscription` plan admits while any included tokens are left (the request crossing the
    // line is served in full) and refuses once none are; an overage plan pays
    // the rest from the lease's credit at its overage price. Both take what room there is.
    if (stopsAtIncludedTokens(plan.pricingModel) && inHand.tokens > 0n && room <= 0n)
      throw includedTokensRefusal(plan, now);
    // The request crossing the line is refused (and GrantLease recalls) while other edges'
    // budgets hold included tokens they have not used: the line is crossed once per period, by
    // the request that meets it with all that is left in hand, not once per edge. Every budget
    // grows under its account's wallet lock (held here), so no edge takes room after this check.
    if (
      stopsAtIncludedTokens(plan.pricingModel) &&
      inHand.tokens > room &&
      (await includedUnusedElsewhere(em, lease, scope, period.start)) > 0n
    )
      throw includedTokensRefusal(plan, now);
    includedCrossing = stopsAtIncludedTokens(plan.pricingModel) && inHand.tokens > room;
    const w = inHand.tokens < room ? inHand.tokens : max0(room);
    steps.push({ scope, span: period, resource: "included_tokens", add: size(left, included, demand.tokens, w) });
  }

  const slots = mine("slots", null);
  if (growth.returnIdleSlots) await returnIdleSlots(em, lease, scope);
  const slotsLeft = plan.maxConcurrent - (await slotsHeld(em, scope));
  if (inHand.requests > 0n && inHand.requests > slotsLeft + unspent(slots))
    throw concurrencyRefusal(plan.maxConcurrent);
  steps.push({ scope, resource: "slots", add: size(slotsLeft, slots, demand.requests, inHand.requests) });

  for (const step of steps) {
    if (step.add <= 0n) continue;
    await addRoom(em, lease, step);
    if (step.resource === "sub_requests_minute" || step.resource === "sub_tokens_minute") {
      const requests = step.resource === "sub_requests_minute" ? step.add : 0n;
      const tokens = step.add - requests;
      await write(
        em,
        `insert into subscription_rate_counters (subscription_id, window_start, requests, tokens) values (?, ?, ?, ?)
         on conflict (subscription_id, window_start) do update set requests = subscription_rate_counters.requests
           + excluded.requests, tokens = subscription_rate_counters.tokens + excluded.tokens`,
        [scope, step.span!.start, requests, tokens],
      );
    }
  }
  return { includedCrossing };
}

/**
 * Slots lent beyond the requests in flight the edge's heartbeat reports go back (docs/leases.md#idle-leases),
 * open budget or fenced: until a reply to that heartbeat, the edge takes no more slots than it
 * reported (HeldLease.pinSlots), so none admitted meanwhile can be lost.
 */
export async function returnIdleSlots(em: Em, lease: LeaseRow, subscriptionId: string): Promise<void> {
  const slots = lease.allowances.find((a) => a.scope === subscriptionId && a.resource === "slots");
  if (!slots || slots.granted <= slots.admitted) return;
  await setGranted(em, slots, slots.admitted);
}

/** The subscription's current period as a window (its included tokens lapse with it). */
function periodOf(subscription: Record<string, unknown>) {
  return {
    start: new Date(subscription.period_start as string),
    end: new Date(subscription.period_end as string),
  };
}

async function minuteCounts(em: Em, subscriptionId: string, start: Date) {
  const [row] = await em.execute(
    `select requests, tokens from subscription_rate_counters where subscription_id = ? and window_start = ?`,
    [subscriptionId, start],
  );
  return { requests: int8(row?.requests), tokens: int8(row?.tokens) };
}

/**
 * Included tokens of the period nobody holds: less what settled and what every lease holds of it (granted − settled while open or fenced, admitted − settled
 * once closed, nothing once released), this lease's unspent room included (growthFor adds it back).
 * What settled is the period's used tokens but the overage tokens charged: an overage request
 * that took only part of its tokens (or none) from the included room at admission paid for the
 * rest, which used none of them.
 */
async function includedLeft(em: Em, plan: PlanTerms, periodStart: Date): Promise<bigint> {
  const [row] = await em.execute(
    `select
       coalesce((select used_tokens - overage_tokens from subscription_usage
         where subscription_id = ? and period_index = ?), 0) as used,
       coalesce((select sum(greatest(0, case when l.status = 'closed' then a.admitted else a.granted end - a.settled))
         from lease_allowances a join leases l on l.id = a.lease_id
         where a.scope = ? and a.resource = 'included_tokens' and a.window_start = ? and l.released_at is null), 0) as leased`,
    [plan.subscriptionId, plan.periodIndex, plan.subscriptionId, periodStart],
  );
  return max0(plan.includedTokens - int8(row?.used) - int8(row?.leased));
}

/** Included tokens of the period that other leases were granted and have not admitted yet. */
async function includedUnusedElsewhere(em: Em, lease: LeaseRow, subscriptionId: string, periodStart: Date) {
  const [row] = await em.execute(
    `select coalesce(sum(a.granted - a.admitted), 0) as unused
     from lease_allowances a join leases l on l.id = a.lease_id
     where a.scope = ? and a.resource = 'included_tokens' and a.window_start = ? and a.granted > a.admitted
       and l.id <> ? and l.status = 'open'`,
    [subscriptionId, periodStart, lease.id],
  );
  return int8(row?.unused);
}

/**
 * Slots in use for the subscription: every lease's (lent while open or fenced, in flight once
 * closed until released), this lease's lent ones included (growthFor
 * adds its unused ones back, so its requests in flight stay counted).
 */
async function slotsHeld(em: Em, subscriptionId: string): Promise<bigint> {
  const [row] = await em.execute(
    `select coalesce(sum(case when l.status = 'closed' then a.admitted else a.granted end), 0) as leased
     from lease_allowances a join leases l on l.id = a.lease_id
     where a.scope = ? and a.resource = 'slots' and l.released_at is null`,
    [subscriptionId],
  );
  return int8(row?.leased);
}

/** Edges whose leases on the account used this subscription's budget in the last 2 TTL (this one too). */
async function edgesUsingSubscription(em: Em, lease: LeaseRow, subscriptionId: string, now: Date, ttlMs: number) {
  const [row] = await em.execute(
    `select count(distinct l.edge_id) as n from leases l join lease_budgets b on b.lease_id = l.id
     where b.subscription_id = ? and l.edge_id <> ? and l.last_used_at >= ?`,
    [subscriptionId, lease.edgeId, new Date(now.getTime() - 2 * ttlMs)],
  );
  return Number(int8(row?.n)) + 1;
}
