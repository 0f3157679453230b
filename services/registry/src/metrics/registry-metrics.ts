import { collectDefaultMetrics, Counter, Registry } from "prom-client";

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
  };
}
