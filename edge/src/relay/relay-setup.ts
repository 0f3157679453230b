import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { hosterAgent } from "@mkt/runtime/hoster-connector";
import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import type { Registry } from "prom-client";
import type { EdgeConfig } from "../config.ts";
import type { UpstreamDirectory } from "../routing/upstream-target.ts";
import { EjectionProber } from "./ejection-prober.ts";
import { OutlierTracker } from "./outlier-tracker.ts";
import type { RelayDeps } from "./relay-answer.ts";
import { createRelayMetrics } from "./relay-metrics.ts";
import { UpstreamPools } from "./upstream-pools.ts";
import { UsagePublisher } from "./usage-publisher.ts";

export interface RelayHandle {
  deps: RelayDeps;
  /** Waits for usage events still becoming durable, then closes the upstream pools and probes. */
  close(): Promise<void>;
}

/**
 * Builds the relay's long-lived parts from the edge's settings: one keep-alive pool per upstream
 * origin (hosters' through the guarded connector), outlier ejection with probing back, and the
 * group-committed usage publisher. `recordUsage` is billing's fallback for events JetStream did
 * not ack in time.
 */
export function startRelay(
  config: EdgeConfig,
  parts: {
    nc: NatsConnection;
    subject: string;
    upstreams: UpstreamDirectory;
    /** The edge's outlier ejections, which the routing table reads too (a model with every server ejected is unhealthy). */
    outliers: OutlierTracker;
    metrics: Registry;
    recordUsage?: (events: UsageCompleted[]) => Promise<void>;
    /**
     * The longest an upstream call may run now: UPSTREAM_TOTAL_TIMEOUT_MS within billing's
     * MAX_REQUEST_MS − 10 s (BillingLeaseSettings); UPSTREAM_TOTAL_TIMEOUT_MS alone when omitted.
     */
    upstreamTotalMs?: () => number;
    log: Logger;
  },
): RelayHandle {
  const { log } = parts;
  const upstreamTotalMs = parts.upstreamTotalMs ?? (() => config.UPSTREAM_TOTAL_TIMEOUT_MS);
  const metrics = createRelayMetrics(parts.metrics);
  const pools = new UpstreamPools({
    connectTimeoutMs: config.UPSTREAM_CONNECT_TIMEOUT_MS,
    allowPrivate: config.ALLOW_PRIVATE_UPSTREAMS,
  });
  // Probes of a hoster's server go through the same guarded connector as its chats.
  const agent = hosterAgent({
    allowPrivate: config.ALLOW_PRIVATE_UPSTREAMS,
    connectTimeoutMs: Math.min(config.UPSTREAM_CONNECT_TIMEOUT_MS, config.UPSTREAM_PROBE_TIMEOUT_MS),
  });
  const { outliers } = parts;
  const revival = new EjectionProber({
    upstreams: parts.upstreams,
    outliers,
    dispatcherFor: (target) =>
      target.trust === "hoster" ? agent : pools.get(new URL(target.baseUrl).origin, "platform"),
    timeoutMs: config.UPSTREAM_PROBE_TIMEOUT_MS,
    log,
  });
  const usage = new UsagePublisher({
    nc: parts.nc,
    subject: parts.subject,
    edgeId: config.EDGE_ID,
    ackTimeoutMs: config.USAGE_PUBLISH_TIMEOUT_MS,
    durableTimeoutMs: config.USAGE_DURABLE_TIMEOUT_MS,
    recordUsage: parts.recordUsage,
    metrics,
    log,
  });
  return {
    deps: {
      upstreams: parts.upstreams,
      pools,
      limits: {
        firstByteMs: config.UPSTREAM_FIRST_BYTE_TIMEOUT_MS,
        idleMs: config.UPSTREAM_IDLE_TIMEOUT_MS,
        // Read as each call starts: billing's MAX_REQUEST_MS comes with its lease replies.
        get totalMs() {
          return upstreamTotalMs();
        },
        maxResponseBytes: config.UPSTREAM_MAX_RESPONSE_BYTES,
      },
      runaway: { ratio: config.OUTPUT_RUNAWAY_RATIO, slackTokens: config.OUTPUT_RUNAWAY_SLACK_TOKENS },
      outliers,
      revival,
      usage,
      metrics,
      log,
    },
    async close() {
      await usage.close();
      await revival.close();
      await pools.close();
      await agent.close();
    },
  };
}

/** Per edge, in memory: ejection reacts to what this edge sees within a few calls. */
export function edgeOutliers(config: EdgeConfig): OutlierTracker {
  return new OutlierTracker({
    ejectAfterFailures: config.UPSTREAM_EJECT_AFTER_FAILURES,
    backoffMs: config.UPSTREAM_EJECT_BACKOFF_MS,
  });
}
