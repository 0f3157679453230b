import { AppError } from "@mkt/runtime/errors";
import { isUuid } from "@mkt/runtime/ids";
import type { LeaseNeed, LeaseReport } from "@mkt/proto/billing/v1/leases";

const bad = (field: string, why: string) => new AppError("invalid_request", `${field} ${why}`, { param: field });

/** The fields every lease call carries: the edge's id, its process's incarnation and boot id, its sequence. */
export function validateEdgeCall(call: {
  edgeId: string;
  sequence: bigint;
  incarnation: bigint;
  bootId: string;
}): void {
  if (!call.edgeId || call.edgeId.length > 200) throw bad("edge_id", "must be 1 to 200 characters");
  if (call.sequence <= 0n) throw bad("sequence", "must be positive");
  if (call.incarnation < 0n) throw bad("incarnation", "must not be negative");
  if (call.bootId.length > 200) throw bad("boot_id", "must be at most 200 characters");
}

export function validateNeed(need: LeaseNeed | undefined, field: string): void {
  if (!need) return;
  if (need.creditMicros < 0n || need.requests < 0n || need.tokens < 0n) throw bad(field, "must not be negative");
  if (need.subscriptionId !== "" && !isUuid(need.subscriptionId))
    throw bad(`${field}.subscription_id`, "must be a UUID");
}

export function validateReports(reports: readonly LeaseReport[]): void {
  for (const report of reports) {
    if (!report.leaseId) throw bad("lease_id", "is required");
    if (report.admitted.some((a) => a.admitted < 0n)) throw bad("admitted", "must not be negative");
    if ((report.keepSpareCreditMicros ?? 0n) < 0n) throw bad("keep_spare_credit_micros", "must not be negative");
    validateNeed(report.demandPerSecond, "demand_per_second");
    for (const need of report.budgetDemand) {
      validateNeed(need, "budget_demand");
      if (!need.subscriptionId) throw bad("budget_demand.subscription_id", "is required");
    }
  }
}

export const amountsOf = (need: LeaseNeed | undefined) => ({
  credit: need?.creditMicros ?? 0n,
  requests: need?.requests ?? 0n,
});

export const budgetAmountsOf = (need: LeaseNeed | undefined) => ({
  requests: need?.requests ?? 0n,
  tokens: need?.tokens ?? 0n,
});
