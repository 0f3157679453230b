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
    /**
     * The EDGE_ISOLATION_MS and MAX_REQUEST_MS the lease was granted under, which close and release
     * it (docs/leases.md#settings); null on leases granted before billing kept them.
     */
    isolationMs: p.integer().nullable(),
    maxRequestMs: p.integer().nullable(),
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
    // Named explicitly: the naming strategy would write `per1m` where the columns say `per_1m`.
    inputPricePer1mMicros: p.bigint("bigint").fieldName("input_price_per_1m_micros"),
    outputPricePer1mMicros: p.bigint("bigint").fieldName("output_price_per_1m_micros"),
    overagePricePer1mMicros: p.bigint("bigint").fieldName("overage_price_per_1m_micros"),
    cachedInputPricePer1mMicros: p.bigint("bigint").nullable().fieldName("cached_input_price_per_1m_micros"),
    /** The plan's limits in force for this budget; 0 where the plan sets none. */
    maxContextTokens: p.bigint("bigint"),
    maxOutputTokens: p.bigint("bigint"),
    rpmLimit: p.bigint("bigint"),
    /** The open plan an implicit subscription is to (null for one a customer subscribed to). */
    productId: p.uuid().nullable(),
    fencedAt: p.datetime().nullable(),
  },
});
