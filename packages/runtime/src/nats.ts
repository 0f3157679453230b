import { connect, createInbox, type NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "./logger.ts";

export type { NatsConnection };

/** Subject and stream names, all under one prefix so test runs do not collide. */
export function eventNames(prefix: string) {
  const streamPrefix = prefix.replace(/[^A-Za-z0-9]/g, "_").toUpperCase();
  return {
    /** Each chat request's usage, published by the edge that relayed it (JetStream). */
    usageCompleted: `${prefix}usage.completed`,
    keysRevoked: `${prefix}keys.revoked`,
    /** Registry's hint that the routing table changed: every replica sends its watchers the new one (NATS core, no stream). */
    catalogChanged: `${prefix}catalog.changed`,
    /** Billing's recall of an edge's leases: request-reply to that edge alone (docs/leases.md). */
    leaseRecall: (edgeId: string) => `${prefix}leases.recall.${edgeId}`,
    usageStream: `${streamPrefix}USAGE`,
    settlerConsumer: "billing-settler",
    /** Registry's durable consumer of usage.completed (hosters' usage-report figures), shared by its replicas. */
    hosterStatsConsumer: "registry-hoster-stats",
  };
}

export type EventNames = ReturnType<typeof eventNames>;

/**
 * The inbox prefix a user's connection puts its reply subjects under (nats.js `inboxPrefix`).
 * Each user may subscribe only under its own (nats-permissions.ts), so no service can read
 * replies meant for another (JetStream acks, recall acks), which a shared `_INBOX.>` would allow.
 */
export function natsInboxPrefix(user: string): string {
  return `_INBOX_${user}`;
}

/**
 * A fresh reply subject under the user's own inbox prefix, for a subscription of the service's
 * own (replies to a publish it expects several answers to, which `request` does not collect).
 */
export function userInbox(user: string): string {
  return createInbox(natsInboxPrefix(user));
}

/**
 * A fresh reply subject under the connection's own inbox prefix, made as nats.js makes one for a
 * request (from its `inboxPrefix` option: the user's with credentials, `_INBOX` without), for a
 * subscription of the service's own that takes replies in place of `request`.
 */
export function connectionInbox(nc: NatsConnection): string {
  return createInbox((nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
}

/** A service's NATS user (nats-permissions.ts); the password is a secret, never logged. */
export interface NatsCredentials {
  user: string;
  password: string;
}

/** The credentials a service's config names (NATS_USER, NATS_PASSWORD), if any. */
export function natsCredentials(config: { NATS_USER?: string; NATS_PASSWORD?: string }): NatsCredentials | undefined {
  return config.NATS_USER && config.NATS_PASSWORD
    ? { user: config.NATS_USER, password: config.NATS_PASSWORD }
    : undefined;
}

/**
 * Connects to NATS, reconnecting forever, and logs connection state changes and the server's
 * errors (a permission violation names the subject). With credentials, replies come under the
 * user's own inbox prefix, the only one its permissions let it subscribe to.
 */
export async function connectNats(
  url: string,
  name: string,
  log: Logger,
  credentials?: NatsCredentials,
): Promise<NatsConnection> {
  const nc = await connect({
    servers: url.split(","),
    name,
    ...(credentials
      ? { user: credentials.user, pass: credentials.password, inboxPrefix: natsInboxPrefix(credentials.user) }
      : {}),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // nats.js builds an Error (a stack trace) up front for every request and publish, in case it
    // times out: a few percent of the registry's CPU at one publish per chat request. Failures
    // still say what failed; they lose only the caller's stack.
    noAsyncTraces: true,
  });
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "error") log.warn({ nats: status.type, err: status.error }, "nats server reported an error");
      else if (status.type === "disconnect" || status.type === "reconnect") {
        log.warn({ nats: status.type }, "nats connection state changed");
      }
    }
  })();
  return nc;
}

/** What the usage stream's owner (billing) decides about it; everything else is fixed here. */
export interface UsageStreamSettings {
  /** Copies of every event in a JetStream cluster (USAGE_STREAM_REPLICAS): 1 on a single server. */
  replicas: number;
}

/**
 * Creates the durable JetStream stream holding usage.completed events, or updates it to this
 * configuration. Billing alone calls it (its USAGE_STREAM_REPLICAS is the one setting of the
 * stream): two processes updating it with different settings would flap it. Everyone else waits
 * for it (waitForUsageStream).
 */
export async function ensureUsageStream(
  nc: NatsConnection,
  names: EventNames,
  settings: UsageStreamSettings = { replicas: 1 },
): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const config = {
    name: names.usageStream,
    subjects: [names.usageCompleted],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    num_replicas: settings.replicas,
    // Nats-Msg-Id (the request id) duplicates within this window are dropped by the server: an
    // event published again after a lost ack is kept once.
    duplicate_window: 2 * 60 * 1_000_000_000,
    max_age: 7 * 24 * 3600 * 1_000_000_000,
  };
  let exists = true;
  try {
    await jsm.streams.info(names.usageStream);
  } catch (err) {
    if (!isStreamNotFound(err)) throw err;
    exists = false;
  }
  try {
    if (exists) await jsm.streams.update(names.usageStream, config);
    else await jsm.streams.add(config);
  } catch (err) {
    // A single server refuses more than one replica, a cluster more than it has nodes: say which
    // setting asked for them.
    throw new Error(
      `${exists ? "updating" : "creating"} the usage stream ${names.usageStream} with ${settings.replicas} ` +
        `replica(s) (USAGE_STREAM_REPLICAS) failed: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

function isStreamNotFound(err: unknown): boolean {
  return (err as { name?: string }).name === "StreamNotFoundError" || String(err).includes("not found");
}

/** How waitForUsageStream paces its looks: doubling from the first, never longer than the last. */
const STREAM_WAIT_FIRST_MS = 250;
const STREAM_WAIT_MAX_MS = 5_000;

/**
 * Resolves once the usage stream exists, looking again with a backoff (250 ms doubling to 5 s)
 * until it does or `signal` aborts. A reader of the stream that is not its owner (registry)
 * starts before billing made it, so it waits instead of creating it with settings of its own.
 * Logs the first miss, then every look that finds it still missing after the backoff is at its
 * longest, at most one line per 5 s.
 */
export async function waitForUsageStream(
  nc: NatsConnection,
  names: EventNames,
  log: Logger,
  signal?: AbortSignal,
): Promise<void> {
  const jsm = await jetstreamManager(nc);
  let delay = STREAM_WAIT_FIRST_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      await jsm.streams.info(names.usageStream);
      if (attempt > 1) log.info({ stream: names.usageStream, attempts: attempt }, "usage stream found");
      return;
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      const missing = isStreamNotFound(err);
      if (attempt === 1 || delay === STREAM_WAIT_MAX_MS) {
        log.warn(
          { stream: names.usageStream, retryInMs: delay, ...(missing ? {} : { err }) },
          missing
            ? "usage stream not created yet (billing creates it); waiting"
            : "usage stream lookup failed; retrying",
        );
      }
    }
    await sleep(delay, undefined, { signal });
    delay = Math.min(delay * 2, STREAM_WAIT_MAX_MS);
  }
}
