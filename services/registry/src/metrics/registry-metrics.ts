import { collectDefaultMetrics, Counter, Histogram, Registry } from "prom-client";
import { FIRST_TOKEN_BUCKETS_SECONDS } from "@mkt/runtime/first-token-buckets";

/**
 * Registry's Prometheus metrics, in a registry of their own (not prom-client's global one), so
 * that several registries in one test process do not share counters. Labels stay low-cardinality:
 * hoster ids (one per registered hoster), providers and error codes (fixed sets).
 */
export interface RegistryMetrics {
  registry: Registry;
  /** Usage reports that disagreed with the registry's count beyond the tolerance, per hoster. */
  usageMismatches: Counter<"hoster_id">;
  /** Chat completions relayed, by provider and outcome (`ok` or the error code). */
  upstreamRequests: Counter<"provider" | "code">;
  /**
   * From sending a request upstream to its first complete SSE event, by provider: the model
   * server's own time to first token as the relay sees it (attempts that failed before it are
   * not observed; they are counted in upstreamRequests).
   */
  upstreamFirstEvent: Histogram<"provider">;
}

export function createRegistryMetrics(): RegistryMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    usageMismatches: new Counter({
      name: "mkt_usage_mismatches_total",
      help: "Hoster usage reports that disagreed with the registry's own token count beyond the tolerance.",
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
  };
}
