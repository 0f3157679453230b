import { RecordUsageRequest } from "@mkt/proto/billing/v1/billing";
import type { Logger } from "@mkt/runtime/logger";
import { connectNats, eventNames, natsCredentials } from "@mkt/runtime/nats";
import { buildApp } from "./app.ts";
import { connectBackends } from "./backends.ts";
import { PromptTokenCounter } from "./chat/prompt-tokens.ts";
import type { EdgeConfig } from "./config.ts";
import { ConfigError } from "@mkt/runtime/config";
import { BillingLeaseSettings, disagreements } from "./leases/lease-settings.ts";
import { followKeyRevocations } from "./key-revocations.ts";
import { startLeaseHeartbeat } from "./leases/lease-heartbeat.ts";
import { followLeaseRecalls } from "./leases/lease-recall.ts";
import { LeaseTable } from "./leases/lease-table.ts";
import { PrincipalCache } from "./principal-cache.ts";
import { watchCatalog } from "./routing/catalog-watch.ts";
import { ModelAliases } from "./routing/model-aliases.ts";
import { RoutingTable } from "./routing/routing-table.ts";
import { startPrincipalRevalidation } from "./principal-revalidation.ts";
import { trackUnusedConnections } from "./unused-connections.ts";
import { IsolationWatch } from "./leases/isolation-watch.ts";
import { edgeMetricsRegistry } from "./plugins/metrics.ts";
import { edgeOutliers, startRelay } from "./relay/relay-setup.ts";

/** After the grace period, how long answers get to send their final error event before their sockets are cut. */
const FINAL_EVENT_MS = 1_000;

export interface EdgeHandle {
  /** Base URL, e.g. http://127.0.0.1:8080 (no trailing slash). */
  url: string;
  port: number;
  /**
   * Readiness off (SHUTDOWN_READINESS_DELAY_MS, still serving) → stop accepting → let running
   * answers finish (up to graceMs, default SHUTDOWN_GRACE_MS; then they end with an error event)
   * → NATS drain.
   */
  close(graceMs?: number): Promise<void>;
}

/** Connects the edge's backends and NATS, builds the app and listens on HOST:PORT (0: a free port). */
export async function startEdge(config: EdgeConfig, log: Logger): Promise<EdgeHandle> {
  const backends = connectBackends(config);
  const nc = await connectNats(config.NATS_URL, "edge", log, natsCredentials(config)).catch((err: unknown) => {
    backends.close();
    throw err;
  });
  const edgeId = config.EDGE_ID;
  // The TTL of a cached principal is accounts' (its replies carry it).
  const principals = new PrincipalCache({ edgeId });
  const names = eventNames(config.EVENTS_PREFIX);
  const stopRevocations = followKeyRevocations(nc, names.keysRevoked, principals, log);
  // Chat routes resolve from registry's table, in memory; while registry is down the edge keeps
  // routing from the last table it received. A model whose every server this edge ejected is
  // unhealthy in it too.
  const outliers = edgeOutliers(config);
  const routing = new RoutingTable(outliers, new ModelAliases(config.MODEL_ALIASES));
  const stopCatalogWatch = watchCatalog(backends.registryStream, routing, log);
  // Billing's LEASE_TTL_MS, EDGE_ISOLATION_MS and MAX_REQUEST_MS, from its lease replies.
  const leaseSettings = new BillingLeaseSettings({ upstreamTotalTimeoutMs: config.UPSTREAM_TOTAL_TIMEOUT_MS, log });
  const isolation: IsolationWatch = new IsolationWatch({
    log,
    inFlight: (): number => leases.inFlight(),
  });
  const leases: LeaseTable = new LeaseTable({
    billing: backends.billing,
    settings: leaseSettings,
    idleMs: config.LEASE_IDLE_MS,
    log,
    edgeId,
    isolation,
  });
  const stopRecalls = followLeaseRecalls(nc, names.leaseRecall(leases.edgeId), leases, log);
  // The subscriptions are live at the server before any key is cached or lease granted.
  await nc.flush();
  const stopHeartbeat = startLeaseHeartbeat(leases, log);
  const ownSettings = {
    leaseTtlMs: config.LEASE_TTL_MS,
    edgeIsolationMs: config.EDGE_ISOLATION_MS,
    maxRequestMs: config.MAX_REQUEST_MS,
  };
  if (Object.values(ownSettings).some((value) => value !== undefined)) {
    // An environment from before billing owned these: it is checked against billing's first reply
    // (the heartbeat at start), waiting for billing if need be, and the edge does not start when
    // they differ: its operator meant another value than the one it would run by.
    const differ = disagreements(ownSettings, await leaseSettings.first);
    if (differ.length > 0) {
      await stopHeartbeat();
      isolation.stop();
      stopRecalls();
      stopCatalogWatch();
      stopRevocations();
      await nc.close();
      backends.close();
      throw new ConfigError(`invalid configuration:\n  ${differ.join("\n  ")}`);
    }
    log.warn(ownSettings, "lease settings in the edge's environment are billing's (they agree): remove them");
  }
  const stopRevalidation = startPrincipalRevalidation(principals, backends.accounts, log);
  const promptTokens = new PromptTokenCounter({
    threads: config.PROMPT_TOKEN_THREADS,
    inlineMaxBytes: config.PROMPT_TOKEN_INLINE_BYTES,
    deadlineMs: config.PROMPT_TOKEN_DEADLINE_MS,
    accountQueue: config.PROMPT_TOKEN_ACCOUNT_QUEUE,
  });
  const metrics = edgeMetricsRegistry();
  const relay = startRelay(config, {
    nc,
    subject: names.usageCompleted,
    upstreamTotalMs: () => leaseSettings.upstreamTotalMs(),
    upstreams: routing,
    outliers,
    metrics,
    // JetStream did not ack in time: billing settles the events itself (the same settlement).
    recordUsage: async (events) => {
      await backends.billing.recordUsage(RecordUsageRequest.fromPartial({ events }), {
        timeoutMs: config.USAGE_DURABLE_TIMEOUT_MS,
      });
    },
    log,
  });
  let closing = false;
  const shutdown = new AbortController();

  const app = await buildApp({
    config,
    log,
    backends,
    principals,
    routing,
    promptTokens,
    leases,
    relay: relay.deps,
    shutdown: shutdown.signal,
    isolation,
    metrics,
    readiness: {
      async check() {
        if (closing) throw new Error("shutting down");
        if (leases.superseded) throw new Error(`another process took EDGE_ID ${edgeId}`);
        if (nc.isClosed()) throw new Error("NATS connection closed");
        // Not before the first routing table: chats would only wait for it.
        if (routing.receivedAt === undefined) throw new Error("no routing table from registry yet");
        const unready = await backends.unready(1_000);
        if (unready.length > 0) throw new Error(`cannot reach ${unready.join(", ")}`);
      },
    },
  });
  const connections = trackUnusedConnections(app.server);
  // A burst of new connections (a thousand streams starting at once) waits in the accept queue
  // instead of being dropped and retried a second or more later; Linux caps this at somaxconn.
  await app.listen({ host: config.HOST, port: config.PORT, backlog: 4096 });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.PORT;
  const host = config.HOST === "0.0.0.0" || config.HOST === "::" ? "127.0.0.1" : config.HOST;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  log.info({ url, edgeId }, "edge listening");

  return {
    url,
    port,
    async close(graceMs = config.SHUTDOWN_GRACE_MS) {
      closing = true;
      // Load balancers see /readyz fail and stop sending here before the listener closes.
      await new Promise((resolve) => setTimeout(resolve, config.SHUTDOWN_READINESS_DELAY_MS));
      // Answers still running after the grace period end with a final error event (never a silent
      // truncation), each recording what was delivered. A connection still open after that is cut.
      let cut: NodeJS.Timeout | undefined;
      const stop = setTimeout(() => {
        shutdown.abort();
        cut = setTimeout(() => app.server.closeAllConnections(), FINAL_EVENT_MS);
      }, graceMs);
      try {
        const closed = app.close();
        connections.destroyUnused();
        await closed;
      } finally {
        clearTimeout(stop);
        clearTimeout(cut);
      }
      await stopRevalidation();
      stopRevocations();
      stopCatalogWatch();
      // Every answer has ended: the leases go back with their final totals, so billing releases
      // their unused credit and room now rather than after their deadline.
      await stopHeartbeat();
      isolation.stop();
      await leases.returnAll().catch((err: unknown) => log.warn({ err }, "returning leases failed"));
      stopRecalls();
      // Every answer's usage event is durable (or handed to billing) before NATS drains.
      await relay.close();
      await nc.drain();
      await promptTokens.close();
      backends.close();
    },
  };
}
