import { max0 } from "@mkt/runtime/bigint-math";
import { hasIncludedTokens, stopsAtIncludedTokens } from "@mkt/runtime/pricing-models";
import { billingDb, heldOfAllowance, prepare } from "../billing-db.ts";
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

// The reads below are built and compiled once (prepare), bound per call; times are compared as
// the driver reads them (BillingDb): as ISO text.

const MINUTE_COUNTS = prepare((p: { subscriptionId: string; start: string }, db) =>
  db
    .selectFrom("subscription_rate_counters as c")
    .select(["c.requests", "c.tokens"])
    .where("c.subscription_id", "=", p.subscriptionId)
    .where("c.window_start", "=", p.start),
);

async function minuteCounts(em: Em, subscriptionId: string, start: Date) {
  const [row] = await MINUTE_COUNTS(await billingDb(em), { subscriptionId, start: start.toISOString() });
  return { requests: int8(row?.requests), tokens: int8(row?.tokens) };
}

const INCLUDED_USED_AND_LEASED = prepare(
  (p: { subscriptionId: string; periodIndex: number; periodStart: string }, db) =>
    db.selectNoFrom((eb) => [
      eb.fn
        .coalesce(
          eb
            .selectFrom("subscription_usage as u")
            .select((u) => u("u.used_tokens", "-", u.ref("u.overage_tokens")).as("used"))
            .where("u.subscription_id", "=", p.subscriptionId)
            .where("u.period_index", "=", p.periodIndex),
          eb.lit(0),
        )
        .as("used"),
      eb.fn
        .coalesce(
          eb
            .selectFrom("lease_allowances as a")
            .innerJoin("leases as l", "l.id", "a.lease_id")
            .select((a) =>
              a.fn
                .sum<string>(a.fn("greatest", [a.lit(0), a(heldOfAllowance(a), "-", a.ref("a.settled"))]))
                .as("leased"),
            )
            .where("a.scope", "=", p.subscriptionId)
            .where("a.resource", "=", "included_tokens")
            .where("a.window_start", "=", p.periodStart)
            .where("l.released_at", "is", null),
          eb.lit(0),
        )
        .as("leased"),
    ]),
);

/**
 * Included tokens of the period nobody holds: less what settled and what every lease holds of it (granted − settled while open or fenced, admitted − settled
 * once closed, nothing once released), this lease's unspent room included (growthFor adds it back).
 * What settled is the period's used tokens but the overage tokens charged: an overage request
 * that took only part of its tokens (or none) from the included room at admission paid for the
 * rest, which used none of them.
 */
async function includedLeft(em: Em, plan: PlanTerms, periodStart: Date): Promise<bigint> {
  const [row] = await INCLUDED_USED_AND_LEASED(await billingDb(em), {
    subscriptionId: plan.subscriptionId,
    periodIndex: plan.periodIndex,
    periodStart: periodStart.toISOString(),
  });
  return max0(plan.includedTokens - int8(row?.used) - int8(row?.leased));
}

const INCLUDED_UNUSED_ELSEWHERE = prepare((p: { subscriptionId: string; periodStart: string; leaseId: string }, db) =>
  db
    .selectFrom("lease_allowances as a")
    .innerJoin("leases as l", "l.id", "a.lease_id")
    .select((eb) =>
      eb.fn.coalesce(eb.fn.sum<string>(eb("a.granted", "-", eb.ref("a.admitted"))), eb.lit(0)).as("unused"),
    )
    .where("a.scope", "=", p.subscriptionId)
    .where("a.resource", "=", "included_tokens")
    .where("a.window_start", "=", p.periodStart)
    .whereRef("a.granted", ">", "a.admitted")
    .where("l.id", "<>", p.leaseId)
    .where("l.status", "=", "open"),
);

/** Included tokens of the period that other leases were granted and have not admitted yet. */
async function includedUnusedElsewhere(em: Em, lease: LeaseRow, subscriptionId: string, periodStart: Date) {
  const [row] = await INCLUDED_UNUSED_ELSEWHERE(await billingDb(em), {
    subscriptionId,
    periodStart: periodStart.toISOString(),
    leaseId: lease.id,
  });
  return int8(row?.unused);
}

const SLOTS_HELD = prepare((p: { subscriptionId: string }, db) =>
  db
    .selectFrom("lease_allowances as a")
    .innerJoin("leases as l", "l.id", "a.lease_id")
    .select((eb) => eb.fn.coalesce(eb.fn.sum<string>(heldOfAllowance(eb)), eb.lit(0)).as("leased"))
    .where("a.scope", "=", p.subscriptionId)
    .where("a.resource", "=", "slots")
    .where("l.released_at", "is", null),
);

/**
 * Slots in use for the subscription: every lease's (lent while open or fenced, in flight once
 * closed until released), this lease's lent ones included (growthFor
 * adds its unused ones back, so its requests in flight stay counted).
 */
async function slotsHeld(em: Em, subscriptionId: string): Promise<bigint> {
  const [row] = await SLOTS_HELD(await billingDb(em), { subscriptionId });
  return int8(row?.leased);
}

const EDGES_USING_SUBSCRIPTION = prepare((p: { subscriptionId: string; edgeId: string; since: string }, db) =>
  db
    .selectFrom("leases as l")
    .innerJoin("lease_budgets as b", "b.lease_id", "l.id")
    .select((eb) => eb.fn.count<string>("l.edge_id").distinct().as("n"))
    .where("b.subscription_id", "=", p.subscriptionId)
    .where("l.edge_id", "<>", p.edgeId)
    .where("l.last_used_at", ">=", p.since),
);

/** Edges whose leases on the account used this subscription's budget in the last 2 TTL (this one too). */
async function edgesUsingSubscription(em: Em, lease: LeaseRow, subscriptionId: string, now: Date, ttlMs: number) {
  const [row] = await EDGES_USING_SUBSCRIPTION(await billingDb(em), {
    subscriptionId,
    edgeId: lease.edgeId,
    since: new Date(now.getTime() - 2 * ttlMs).toISOString(),
  });
  return Number(int8(row?.n)) + 1;
}
