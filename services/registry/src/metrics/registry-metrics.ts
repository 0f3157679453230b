import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { FIRST_TOKEN_BUCKETS_SECONDS } from "@mkt/runtime/first-token-buckets";

/**
 * Registry's Prometheus metrics, in a registry of their own (not prom-client's global one), so
 * that several registries in one test process do not share counters. Labels stay low-cardinality:
 * hoster ids (one per registered hoster), providers and error codes (fixed sets).
 */
export interface RegistryMetrics {
  registry: Registry;
  /** Usage reports that claimed more than the registry's count (beyond the tolerance) or the cap, per hoster. */
  usageMismatches: Counter<"hoster_id">;
  /** Chat completions relayed, by provider and outcome (`ok` or the error code). */
  upstreamRequests: Counter<"provider" | "code">;
  /**
   * From sending a request upstream to its first complete SSE event, by provider: the model
   * server's own time to first token as the relay sees it (attempts that failed before it are
   * not observed; they are counted in upstreamRequests).
   */
  upstreamFirstEvent: Histogram<"provider">;
  /**
   * Answers the runaway guard cut (an upstream that ignored max_tokens), by provider and hoster
   * (empty for the platform's own local and cloud servers).
   */
  outputRunaways: Counter<"provider" | "hoster_id">;
  /** usage.completed events in the outbox, all replicas' together, as of this replica's last replay pass. */
  usageOutboxDepth: Gauge;
  /** Events written to the outbox because JetStream did not ack within USAGE_PUBLISH_TIMEOUT_MS. */
  usageOutboxWritten: Counter;
  /**
   * From publishing a usage.completed to its being durable, by where (`jetstream`: acked;
   * `outbox`: JetStream did not ack in time and the outbox row committed): what the durability
   * costs each answer (its client gets the last bytes only after).
   */
  usageDurable: Histogram<"via">;
  /** Outbox rows this replica replayed to JetStream (acked, then deleted). */
  usageOutboxReplayed: Counter;
  /** Tries in which neither JetStream nor the outbox took a usage event (NATS and Postgres both failing). */
  usageDurabilityFailures: Counter;
}

export function createRegistryMetrics(): RegistryMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    usageMismatches: new Counter({
      name: "mkt_usage_mismatches_total",
      help: "Hoster usage reports that claimed more tokens than the registry counted (beyond the tolerance) or the cap.",
      labelNames: ["hoster_id"],
      registers: [registry],
    }),
    upstreamRequests: new Counter({
      name: "mkt_upstream_requests_total",
      help: "Chat completions relayed to upstreams, by provider and outcome (ok or the error code).",
      labelNames: ["provider", "code"],
      registers: [registry],
    }),
    upstreamFirstEvent: new Histogram({
      name: "mkt_upstream_first_event_seconds",
      help: "From sending a chat request upstream to its first complete SSE event, by provider.",
      labelNames: ["provider"],
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers: [registry],
    }),
    outputRunaways: new Counter({
      name: "mkt_output_runaways_total",
      help: "Chat completions cut by the runaway guard: the upstream ran past max_tokens by the tolerance.",
      labelNames: ["provider", "hoster_id"],
      registers: [registry],
    }),
    usageOutboxDepth: new Gauge({
      name: "mkt_usage_outbox_events",
      help: "usage.completed events waiting in registry's outbox for a replay to JetStream (all replicas).",
      registers: [registry],
    }),
    usageOutboxWritten: new Counter({
      name: "mkt_usage_outbox_written_total",
      help: "usage.completed events written to the outbox because JetStream did not ack in time.",
      registers: [registry],
    }),
    usageDurable: new Histogram({
      name: "mkt_usage_durable_seconds",
      help: "From publishing a usage.completed to its being durable: acked by JetStream, or in the outbox.",
      labelNames: ["via"],
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers: [registry],
    }),
    usageOutboxReplayed: new Counter({
      name: "mkt_usage_outbox_replayed_total",
      help: "usage.completed events replayed from the outbox to JetStream by this replica.",
      registers: [registry],
    }),
    usageDurabilityFailures: new Counter({
      name: "mkt_usage_durability_failures_total",
      help: "Tries in which neither JetStream nor the outbox took a usage.completed event (retried until one does).",
      registers: [registry],
    }),
  };
}
