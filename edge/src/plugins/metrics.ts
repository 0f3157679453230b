import type { FastifyInstance } from "fastify";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import { FIRST_TOKEN_BUCKETS_SECONDS } from "@mkt/runtime/first-token-buckets";
import type { RoutingTable } from "../routing/routing-table.ts";

/** Request durations: API calls take milliseconds, streamed chat completions up to minutes. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/**
 * Where a chat completion's first token waits at the edge. With the relay's
 * mkt_upstream_first_event_seconds, an operator can tell the gateway's own share of a slow first
 * token from the model server's.
 */
export interface ChatMetrics {
  /**
   * Admission against the account's lease, its two steps summed (the prompt's counting between
   * them left out): microseconds when warm, a GrantLease round trip when cold or short.
   */
  admit: Histogram;
  /**
   * From the edge receiving the request to the relay's first event: the first chunk of a stream,
   * the whole completion otherwise (`stream` label).
   */
  firstEvent: Histogram<"stream">;
  /**
   * Each GrantLease the edge's lease table made (the cold or short path), answered or not: how
   * often admission goes to billing, and how long billing takes then.
   */
  grant: Histogram;
}

/**
 * GET /metrics: the process's default metrics, every request counted by method,
 * route and status, with its duration, and the chat steps the routes observe (ChatMetrics). The
 * route label is the route's pattern (`/v1/subscriptions/:subscription_id`), never the raw URL,
 * and `unmatched` for a 404 with no route, so a scanner cannot grow the label set. Each app has a
 * registry of its own (not prom-client's global one, made by `edgeMetricsRegistry`), so several
 * apps in one process do not share counters.
 */
export function installMetrics(
  app: FastifyInstance,
  registry: Registry,
  routing: Pick<RoutingTable, "version" | "receivedAt">,
): ChatMetrics {
  const startedAt = Date.now();
  // How stale the edge's routing is: it grows while registry is down (the edge keeps routing from
  // its last table), and counts from the edge's start until its first table.
  new Gauge({
    name: "mkt_routing_table_age_seconds",
    help: "Seconds since the edge received its routing table from registry (since its start, before the first).",
    registers: [registry],
    collect() {
      this.set((Date.now() - (routing.receivedAt ?? startedAt)) / 1_000);
    },
  });
  new Gauge({
    name: "mkt_routing_table_version",
    help: "Version of the routing table the edge routes from (0 before the first); edges on the same table agree.",
    registers: [registry],
    collect() {
      this.set(Number(routing.version));
    },
  });
  const requests = new Counter({
    name: "mkt_http_requests_total",
    help: "HTTP requests answered by the edge, by method, route pattern and status.",
    labelNames: ["method", "route", "status"],
    registers: [registry],
  });
  const duration = new Histogram({
    name: "mkt_http_request_duration_seconds",
    help: "HTTP request duration at the edge (receipt to last byte), by method and route pattern.",
    labelNames: ["method", "route"],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  app.addHook("onResponse", async (request, reply) => {
    const labels = { method: request.method, route: request.routeOptions.url ?? "unmatched" };
    requests.inc({ ...labels, status: String(reply.statusCode) });
    duration.observe(labels, reply.elapsedTime / 1_000);
  });
  app.get("/metrics", { schema: { hide: true } }, async (_request, reply) => {
    const text = await registry.metrics();
    return reply.type(registry.contentType).send(text);
  });
  return {
    admit: new Histogram({
      name: "mkt_chat_admit_seconds",
      help: "Admission of a chat request against the edge's lease (in memory when warm, one GrantLease when cold).",
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers: [registry],
    }),
    grant: new Histogram({
      name: "mkt_lease_grant_seconds",
      help: "GrantLease calls of the edge's lease table (cold or short admission), from send to reply or failure.",
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers: [registry],
    }),
    firstEvent: new Histogram({
      name: "mkt_chat_first_event_seconds",
      help: "From receiving a chat request to the relay's first event (first chunk, or the whole completion).",
      labelNames: ["stream"],
      buckets: FIRST_TOKEN_BUCKETS_SECONDS,
      registers: [registry],
    }),
  };
}

/** The edge's Prometheus registry, with the process's default metrics. */
export function edgeMetricsRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return registry;
}
