import type { BudgetTerms } from "@mkt/proto/billing/v1/leases";
import type { LimitReset } from "../key-limits/key-windows.ts";
import type { AllowanceResource } from "./allowance-resource.ts";

/** A lease row as the lease transactions read it (after the account's wallet is locked). */
export interface LeaseRow {
  id: string;
  edgeId: string;
  accountId: string;
  tier: string;
  status: "open" | "fenced" | "closed";
  appliedSequence: bigint;
  heldMicros: bigint;
  settledMicros: bigint;
  /** When the closer gave its hold back (nothing is held for it any more), or null. */
  releasedAt: Date | null;
  /** Null while open (its edge session's deadline applies); the deadline it was fenced or closed at. */
  deadline: Date | null;
  /**
   * The EDGE_ISOLATION_MS and MAX_REQUEST_MS it was granted under (its edge runs by no longer
   * bounds), which close and release it; null on leases granted before billing kept them (billing's
   * own settings then apply).
   */
  isolationMs: number | null;
  maxRequestMs: number | null;
  allowances: AllowanceRow[];
  budgets: BudgetRow[];
  /** The account's spend-limited keys (their rooms are the allowances scoped to them). */
  keyLimits: KeyLimitRow[];
}

/**
 * A key with a spend limit (docs/adr/0020-key-spend-limits-in-billing.md): its lease budget is
 * KEY_CREDIT room in its window.
 */
export interface KeyLimitRow {
  keyId: string;
  limitMicros: bigint;
  reset: LimitReset;
}

/** A subscription's budget nested in a lease (its rooms are the allowances scoped to it). */
export interface BudgetRow {
  subscriptionId: string;
  status: "open" | "fenced";
  state: string;
  periodIndex: number;
  /** The terms snapshot the edge admits by (LeaseState's BudgetTerms). */
  terms: BudgetTerms;
}

export interface AllowanceRow {
  id: string;
  scope: string;
  resource: AllowanceResource;
  windowStart: Date | null;
  windowEnd: Date | null;
  granted: bigint;
  admitted: bigint;
  settled: bigint;
}

export interface WalletRow {
  posted: bigint;
  held: bigint;
}

export const creditOf = (lease: LeaseRow) => lease.allowances.find((a) => a.resource === "credit");
