import { collectDefaultMetrics, Counter, Gauge, Registry } from "prom-client";
import type { EndpointStats } from "@mkt/proto/registry/v1/registry";

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
  /** Usage events in registry's usage_dead_letters (undecodable, or whose figures failed to be written repeatedly). */
  usageDeadLetters: Gauge;
}

/**
 * Each hoster model's live figures over the last 30 minutes (endpoint-figures.ts), read from the
 * database at each scrape: `stats` is EndpointMinutesStore.stats on the hosters' clock. A figure
 * with no sample behind it (an uptime with no answer, a percentile with no success) is left out.
 */
function endpointGauges(registry: Registry, stats: () => Promise<Map<string, EndpointStats>>): void {
  // One read fills every gauge: each gauge's collect awaits the scrape's read (Prometheus reads
  // all of them at once), which is shared for a second.
  let filling: Promise<void> | undefined;
  const fill = () => (filling ??= load().finally(() => setTimeout(() => (filling = undefined), 1_000).unref()));
  const labelNames = ["hoster_id", "model_id"] as const;
  const gauge = (name: string, help: string) =>
    new Gauge({ name, help, labelNames, registers: [registry], collect: fill });
  const requests = gauge("mkt_endpoint_requests_30m", "Answers a hoster model gave in the last 30 minutes.");
  const faults = gauge(
    "mkt_endpoint_faults_30m",
    "The hoster's failures (5xx, timeouts, broken streams) in the last 30 minutes.",
  );
  const limited = gauge("mkt_endpoint_upstream_429s_30m", "The hoster's own 429s in the last 30 minutes.");
  const uptime = gauge("mkt_endpoint_uptime_ratio", "Successes over successes and faults in the last 30 minutes.");
  const latency = gauge(
    "mkt_endpoint_latency_p50_seconds",
    "Median answer latency in the last 30 minutes (its histogram bucket's bound).",
  );
  const ttft = gauge(
    "mkt_endpoint_ttft_p50_seconds",
    "Median time to first token in the last 30 minutes (its histogram bucket's bound).",
  );
  async function load(): Promise<void> {
    const read = await stats();
    for (const g of [requests, faults, limited, uptime, latency, ttft]) g.reset();
    for (const [key, { last30m: f }] of read) {
      if (!f) continue;
      const [hosterId, ...model] = key.split("/");
      const labels = { hoster_id: hosterId!, model_id: model.join("/") };
      requests.set(labels, Number(f.requests));
      faults.set(labels, Number(f.faults));
      limited.set(labels, Number(f.upstream429s));
      if (f.uptime !== undefined) uptime.set(labels, f.uptime);
      if (f.latencyP50Ms !== undefined) latency.set(labels, Number(f.latencyP50Ms) / 1000);
      if (f.ttftP50Ms !== undefined) ttft.set(labels, Number(f.ttftP50Ms) / 1000);
    }
  }
}

export function createRegistryMetrics(endpointStats?: () => Promise<Map<string, EndpointStats>>): RegistryMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  if (endpointStats) endpointGauges(registry, endpointStats);
  return {
    registry,
    usageMismatches: new Counter({
      name: "mkt_usage_mismatches_total",
      help: "Hoster usage reports that claimed more tokens than the edge counted (beyond the tolerance) or the cap.",
      labelNames: ["hoster_id"],
      registers: [registry],
    }),
    usageDeadLetters: new Gauge({
      name: "mkt_usage_dead_letters",
      help: "Usage events this service could not decode or record, kept in its usage_dead_letters.",
      registers: [registry],
    }),
  };
}
