import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { SettleOutcome } from "../settlement/settle-outcome.ts";

/**
 * Billing's Prometheus metrics, in a registry of their own (not prom-client's global one), so
 * that several billings in one test process do not share counters. Built once in server.ts and
 * passed down; every label is from a fixed set.
 */
export interface BillingMetrics {
  registry: Registry;
  /** Usage events whose settlement committed, by outcome. */
  settled: Counter<"outcome">;
  /** Events that failed to settle alone: `retried` (nak'd) or `dead_lettered` (kept in usage_dead_letters after the last attempt). */
  failed: Counter<"result">;
  /** JetStream publish time of an event → commit of its settlement. */
  settlementLag: Histogram;
  /** Usage events in usage_dead_letters not replayed yet: each is an answer not charged (or a hoster not paid) until an operator replays it. */
  deadLetters: Gauge;
  /** Lease usage settled after its hold was released, whose shortfall the platform absorbed. */
  writeOffs: Counter;
  writeOffMicros: Counter;
  /** GrantLease calls (the edges' cold or short path), by how they ended. */
  leaseGrants: Counter<"result">;
  /** Lease recalls sent to edges, by how they ended. */
  leaseRecalls: Counter<"result">;
  /** Leases with no final report that the closer closed at deadline + EDGE_ISOLATION_MS. */
  leasesClosedByDeadline: Counter;
  /** Edge processes that took a new incarnation of their EDGE_ID (a start or a restart). */
  edgeIncarnations: Counter;
  /** Leases an edge's new incarnation closed at once (its previous process died holding them). */
  leasesClosedByIncarnation: Counter;
}

/** Every outcome, so each series exists (at 0) from the first scrape and rate() sees its first event. */
const OUTCOMES: readonly SettleOutcome[] = [
  "settled",
  "late_settled",
  "clamped",
  "duplicate",
  "no_hold",
  "unknown_lease",
  "foreign_lease",
  "over_lease_credit",
];

/**
 * From a lone event settled at once (~the batch window, 50 ms) to a backlog of minutes (billing
 * down, a consumer stuck): the alert's threshold (30 s) falls on a bucket boundary.
 */
const LAG_BUCKETS_SECONDS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];

export function createBillingMetrics(): BillingMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const metrics: BillingMetrics = {
    registry,
    settled: new Counter({
      name: "mkt_usage_events_settled_total",
      help: "Usage events whose settlement committed, by outcome.",
      labelNames: ["outcome"],
      registers: [registry],
    }),
    failed: new Counter({
      name: "mkt_usage_events_failed_total",
      help: "Usage events that failed to settle on their own: retried later, or dead-lettered after the last attempt.",
      labelNames: ["result"],
      registers: [registry],
    }),
    settlementLag: new Histogram({
      name: "mkt_settlement_lag_seconds",
      help: "From a usage event's JetStream publish time to the commit of its settlement.",
      buckets: LAG_BUCKETS_SECONDS,
      registers: [registry],
    }),
    deadLetters: new Gauge({
      name: "mkt_usage_dead_letters",
      help: "Usage events billing could not decode, record or settle, kept in usage_dead_letters until replayed.",
      registers: [registry],
    }),
    writeOffs: new Counter({
      name: "mkt_write_offs_total",
      help: "Lease usage settled after its hold was released, with a shortfall the platform wrote off.",
      registers: [registry],
    }),
    writeOffMicros: new Counter({
      name: "mkt_write_off_microdollars_total",
      help: "Micro-USD written off: charges the customer's wallet could not cover.",
      registers: [registry],
    }),
    leaseGrants: new Counter({
      name: "mkt_lease_grants_total",
      help: "GrantLease calls: granted, refused (402/429 or another client error), or failed.",
      labelNames: ["result"],
      registers: [registry],
    }),
    leaseRecalls: new Counter({
      name: "mkt_lease_recalls_total",
      help: "Lease recalls sent to edges: acked, or timed out (the fence covers them).",
      labelNames: ["result"],
      registers: [registry],
    }),
    leasesClosedByDeadline: new Counter({
      name: "mkt_leases_closed_by_deadline_total",
      help: "Leases with no final report, closed by billing at their deadline + EDGE_ISOLATION_MS.",
      registers: [registry],
    }),
    edgeIncarnations: new Counter({
      name: "mkt_edge_incarnations_total",
      help: "Edge processes that took a new incarnation of their EDGE_ID (each start or restart).",
      registers: [registry],
    }),
    leasesClosedByIncarnation: new Counter({
      name: "mkt_leases_closed_by_incarnation_total",
      help: "Leases closed and released at once because their edge restarted under the same EDGE_ID.",
      registers: [registry],
    }),
  };
  for (const outcome of OUTCOMES) metrics.settled.inc({ outcome }, 0);
  for (const result of ["retried", "dead_lettered"]) metrics.failed.inc({ result }, 0);
  for (const result of ["acked", "timed_out"]) metrics.leaseRecalls.inc({ result }, 0);
  for (const result of ["granted", "refused", "failed"]) metrics.leaseGrants.inc({ result }, 0);
  return metrics;
}
