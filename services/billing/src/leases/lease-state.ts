import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import type { BillingConfig } from "../config.ts";
import { tierLimits } from "../rate-limits/rate-limiter.ts";
import { ALLOWANCE_RESOURCES } from "./allowance-resource.ts";
import type { AllowanceRow, LeaseRow } from "./lease-rows.ts";

const STATUSES: Record<LeaseRow["status"], LeaseStatus> = {
  open: LeaseStatus.LEASE_STATUS_OPEN,
  fenced: LeaseStatus.LEASE_STATUS_FENCED,
  closed: LeaseStatus.LEASE_STATUS_CLOSED,
};

/**
 * The lease as the edge should now see it. Only durations: an open lease is valid for one TTL
 * from the call's send time (or `validForMs`: the session's deadline less the call's arrival); a
 * window's room until min(that, window end − now), and a next window's from `starts_in_ms`. Rooms
 * of windows already past are left out (they lapsed).
 */
export function leaseState(
  lease: LeaseRow,
  now: Date,
  config: Pick<BillingConfig, "LEASE_TTL_MS" | "TIERS">,
  validForMs = config.LEASE_TTL_MS,
): LeaseState {
  const ttlMs = Math.max(0, Math.floor(validForMs));
  const open = lease.status === "open";
  const room = (a: AllowanceRow): LeaseRoom => {
    // Included tokens are granted for the subscription's current period only, so they are usable
    // at once, even when a renewal run ahead of time opened a period that starts later.
    const startsIn =
      a.windowStart && a.resource !== "included_tokens" ? Math.max(0, a.windowStart.getTime() - now.getTime()) : 0;
    const endsIn = a.windowEnd ? Math.max(0, a.windowEnd.getTime() - now.getTime()) : 0;
    const validFor = a.windowEnd ? Math.min(ttlMs, endsIn) : ttlMs;
    return {
      allowanceId: a.id,
      resource: ALLOWANCE_RESOURCES[a.resource] ?? LeaseResource.LEASE_RESOURCE_UNSPECIFIED,
      granted: a.granted,
      startsInMs: BigInt(startsIn),
      validForMs: BigInt(open ? validFor : 0),
      endsInMs: BigInt(open ? endsIn : 0),
    };
  };
  const credit = lease.allowances.find((a) => a.resource === "credit");
  // Windowed rooms of past windows lapsed; slots have no window.
  const live = (a: AllowanceRow) => a.resource === "slots" || (a.windowEnd !== null && a.windowEnd > now);
  // A budget's included tokens are its subscription's current period's, the latest window: a
  // room of the period before a renewal (still live while billing's clock is at the boundary) is
  // left out, so the edge takes from the room billing grows, not from one it never grows again.
  const currentPeriod = (subscriptionId: string) =>
    Math.max(
      ...lease.allowances
        .filter((a) => a.scope === subscriptionId && a.resource === "included_tokens" && a.windowStart)
        .map((a) => a.windowStart!.getTime()),
    );
  const budgets = lease.budgets.map((b) => {
    const usable = open && b.status === "open";
    const period = currentPeriod(b.subscriptionId);
    return {
      subscriptionId: b.subscriptionId,
      status: usable ? LeaseStatus.LEASE_STATUS_OPEN : LeaseStatus.LEASE_STATUS_FENCED,
      state: b.state,
      terms: b.terms,
      rooms: lease.allowances
        .filter((a) => a.scope === b.subscriptionId && live(a))
        .filter((a) => a.resource !== "included_tokens" || a.windowStart?.getTime() === period)
        .map(room)
        .map((r) => (usable ? r : { ...r, validForMs: 0n })),
    };
  });
  // Every spend-limited key is listed, with room or without: the edge must not admit on a listed
  // key without taking from its room.
  const keyBudgets = lease.keyLimits.map((k) => ({
    keyId: k.keyId,
    limitMicros: k.limitMicros,
    limitReset: k.reset ?? "never",
    rooms: lease.allowances.filter((a) => a.scope === k.keyId && a.resource === "key_credit" && live(a)).map(room),
  }));
  return {
    leaseId: lease.id,
    accountId: lease.accountId,
    status: STATUSES[lease.status],
    validForMs: BigInt(open ? ttlMs : 0),
    credit: credit ? room(credit) : undefined,
    rooms: lease.allowances.filter((a) => a.scope === "" && a.resource !== "credit" && live(a)).map(room),
    budgets,
    appliedSequence: lease.appliedSequence,
    limitPerMinute: tierLimits(config.TIERS, lease.tier).limitPerMinute,
    keyBudgets,
  };
}

/** The answer for a lease the edge named that is not its own (or no longer exists): drop it. */
export function unknownLease(leaseId: string): LeaseState {
  return {
    leaseId,
    accountId: "",
    status: LeaseStatus.LEASE_STATUS_CLOSED,
    validForMs: 0n,
    rooms: [],
    budgets: [],
    appliedSequence: 0n,
    limitPerMinute: 0n,
    keyBudgets: [],
  };
}
