import { collectDefaultMetrics, Counter, Registry } from "prom-client";

/**
 * Registry's Prometheus metrics, in a registry of their own (not prom-client's global one), so
 * that several registries in one test process do not share counters. Labels stay low-cardinality:
 * hoster ids (one per registered hoster), providers and error codes (fixed sets).
 */
export interface RegistryMetrics {
  registry: Registry;
  /**
   * Usage reports that claimed more than the edge counted (beyond the tolerance) or the cap, per
   * hoster, as read from the edges' usage events (hoster-usage-consumer.ts).
   */
  usageMismatches: Counter<"hoster_id">;
}

export function createRegistryMetrics(): RegistryMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    usageMismatches: new Counter({
      name: "mkt_usage_mismatches_total",
      help: "Hoster usage reports that claimed more tokens than the edge counted (beyond the tolerance) or the cap.",
      labelNames: ["hoster_id"],
      registers: [registry],
    }),
  };
}
