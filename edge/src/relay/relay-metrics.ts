import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { FIRST_TOKEN_BUCKETS_SECONDS } from "@mkt/runtime/first-token-buckets";

/** Events per group commit: one for a lone answer, tens when a thousand streams end together. */
const GROUP_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/**
 * The relay's Prometheus metrics, in the edge's registry. Labels stay low-cardinality: providers,
 * outcome codes (fixed sets) and hoster ids (one per registered hoster); never a URL or a token.
 */
export interface RelayMetrics {
  /** Chat completions relayed, by provider and outcome (`ok` or the error code). */
  upstreamRequests: Counter<"provider" | "code">;
  /**
   * From sending a request upstream to its first complete SSE event, by provider: the model
   * server's own time to first token (attempts that failed before it are counted in
   * upstreamRequests, not here).
   */
  upstreamFirstEvent: Histogram<"provider">;
  /** Answers the runaway guard cut (an upstream that ignored max_tokens), by provider and hoster. */
  outputRunaways: Counter<"provider" | "hoster_id">;
  /** From an answer's usage event being handed over to its being durable, by `via` (jetstream, record_usage). */
  usageDurable: Histogram<"via">;
  /** Events published together in one group commit. */
  usagePublishGroup: Histogram;
  /** Events JetStream did not ack in time, handed to billing's RecordUsage instead. */
  usageRecordFallbacks: Counter;
  /** Events neither JetStream nor RecordUsage took yet: kept in memory and retried. */
  usagePending: Gauge;
  /** Answers whose last bytes went out before their usage event was durable (USAGE_DURABLE_TIMEOUT_MS passed). */
  usageDurableTimeouts: Counter;
}

export function createRelayMetrics(registry: Registry): RelayMetrics {
  const registers = [registry];
  return {
    upstreamRequests: new Counter({
      name: "mkt_upstream_requests_total",
      help: "Chat completions relayed to upstreams, by provider and outcome (ok or the error code).",
      labelNames: ["provider", "code"],
      registers,
    }),
    upstreamFirstEvent: new Histogram({
      name: "mkt_upstream_first_event_seconds",
      help: "From sending a chat request upstream to its first complete SSE event, by provider.",
      labelNames: ["provider"],
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers,
    }),
    outputRunaways: new Counter({
      name: "mkt_output_runaways_total",
      help: "Chat completions cut by the runaway guard: the upstream ran past max_tokens by the tolerance.",
      labelNames: ["provider", "hoster_id"],
      registers,
    }),
    usageDurable: new Histogram({
      name: "mkt_usage_durable_seconds",
      help: "From an answer's usage.completed being handed over to its being durable: acked by JetStream, or recorded by billing's RecordUsage.",
      labelNames: ["via"],
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers,
    }),
    usagePublishGroup: new Histogram({
      name: "mkt_usage_publish_group_size",
      help: "usage.completed events published to JetStream together, their acks awaited together.",
      buckets: GROUP_SIZE_BUCKETS,
      registers,
    }),
    usageRecordFallbacks: new Counter({
      name: "mkt_usage_record_fallbacks_total",
      help: "usage.completed events JetStream did not ack in time, handed to billing's RecordUsage.",
      registers,
    }),
    usagePending: new Gauge({
      name: "mkt_usage_pending_events",
      help: "usage.completed events neither JetStream nor billing has taken yet, held in the edge's memory and retried.",
      registers,
    }),
    usageDurableTimeouts: new Counter({
      name: "mkt_usage_durable_timeouts_total",
      help: "Answers whose last bytes were sent before their usage event was durable (USAGE_DURABLE_TIMEOUT_MS passed).",
      registers,
    }),
  };
}
