import { defineEntity, p } from "@mikro-orm/core";

/**
 * One edge's session: its deadline is that of all its open leases (docs/leases.md), and its
 * incarnation the one process whose calls are served under its id (edge-incarnation.ts).
 */
export const EdgeSession = defineEntity({
  name: "EdgeSession",
  tableName: "edge_sessions",
  properties: {
    edgeId: p.text().primary(),
    sequence: p.bigint("bigint"),
    incarnation: p.bigint("bigint"),
    /** The random id the incarnation's process drew at start ('' before incarnations). */
    bootId: p.text(),
    deadline: p.datetime(),
    createdAt: p.datetime(),
  },
});

/**
 * An admission lease of one edge on one account. `heldMicros` is what the wallet holds for it:
 * granted − settled while open or fenced, admitted − settled once closed, 0 once released.
 */
export const Lease = defineEntity({
  name: "Lease",
  tableName: "leases",
  properties: {
    id: p.uuid().primary(),
    edgeId: p.text(),
    accountId: p.uuid(),
    /** The tier at grant time, whose limits size the lease's growth. */
    tier: p.text(),
    status: p.text(), // open | fenced | closed
    appliedSequence: p.bigint("bigint"),
    /** Null while open (the edge session's deadline applies); frozen when fenced. */
    deadline: p.datetime().nullable(),
    heldMicros: p.bigint("bigint"),
    settledMicros: p.bigint("bigint"),
    lastUsedAt: p.datetime(),
    closedAt: p.datetime().nullable(),
    /** When a closed lease's unsettled remainder is released (closed_at + MAX_REQUEST_MS). */
    releaseAt: p.datetime().nullable(),
    releasedAt: p.datetime().nullable(),
    createdAt: p.datetime(),
  },
});

/** A lease's cumulative totals for one resource in one window (credit: no window). */
export const LeaseAllowance = defineEntity({
  name: "LeaseAllowance",
  tableName: "lease_allowances",
  properties: {
    id: p.uuid().primary(),
    leaseId: p.uuid(),
    /** '' for the account; the subscription id for a nested budget's room. */
    scope: p.text(),
    resource: p.text(),
    windowStart: p.datetime().nullable(),
    windowEnd: p.datetime().nullable(),
    granted: p.bigint("bigint"),
    admitted: p.bigint("bigint"),
    /** Included tokens only: worst-case tokens of settled requests (no longer held). */
    settled: p.bigint("bigint"),
  },
});

/**
 * A subscription's budget nested in a lease: its state and the terms snapshot its requests
 * settle on. Fenced by the cancel, pause or past due that commits; reopened only by GrantLease.
 */
export const LeaseBudget = defineEntity({
  name: "LeaseBudget",
  tableName: "lease_budgets",
  properties: {
    leaseId: p.uuid().primary(),
    subscriptionId: p.uuid().primary(),
    status: p.text(), // open | fenced
    state: p.text(), // the subscription's status: active | paused | past_due | cancelled
    hosterId: p.uuid().nullable(),
    periodIndex: p.integer(),
    pricingModel: p.text(),
    includedTokens: p.bigint("bigint"),
    inputPricePer1mMicros: p.bigint("bigint"),
    outputPricePer1mMicros: p.bigint("bigint"),
    overagePricePer1mMicros: p.bigint("bigint"),
    fencedAt: p.datetime().nullable(),
  },
});
