import { eventNames, natsInboxPrefix } from "./nats.ts";

/**
 * The NATS users, one per service (docs/deploy.md#nats-users). Every replica of a service connects
 * as its service's user: the server cannot tell an edge from another edge, only an edge from
 * billing.
 */
export const NATS_USERS = ["edge", "accounts", "billing", "registry"] as const;
export type NatsUser = (typeof NATS_USERS)[number];

/** What one user may do; anything not listed is refused by the server. */
export interface NatsUserPermissions {
  /** Subjects the user may publish to (requests included). Empty: none. */
  publish: string[];
  /** Subjects the user may subscribe to. */
  subscribe: string[];
  /**
   * May answer a request it received, once, on that request's reply subject only (nats-server's
   * `allow_responses`): how an edge acks a recall without any right to publish elsewhere.
   */
  allowResponses: boolean;
}

/**
 * The one table of who may publish and subscribe to what, for subjects under `prefix`
 * (EVENTS_PREFIX). The nats-server configuration (nats-server-config.ts) is rendered from it, and
 * the tests start their servers with that rendering. A subject the code starts using must be
 * added here, or the server refuses it: that is the point.
 */
export function natsPermissions(prefix: string): Record<NatsUser, NatsUserPermissions> {
  const names = eventNames(prefix);
  const stream = names.usageStream;
  const consumer = names.settlerConsumer;
  // A durable pull consumer's API (create, update, info, pull) and acks, for its one owner.
  const consumerApi = (durable: string) => [
    `$JS.API.CONSUMER.INFO.${stream}.${durable}`,
    `$JS.API.CONSUMER.CREATE.${stream}.${durable}`,
    `$JS.API.CONSUMER.CREATE.${stream}.${durable}.>`,
    `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.${durable}`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.${durable}`,
    `$JS.ACK.${stream}.${durable}.>`,
  ];
  const inbox = (user: NatsUser) => `${natsInboxPrefix(user)}.>`;
  // Billing owns the usage stream: it creates it, or updates it to its settings
  // (USAGE_STREAM_REPLICAS), at start. Registry only looks it up, waiting until billing made it:
  // two writers of one stream's settings would flap it. Nothing else of JetStream's API is theirs.
  const usageStreamLookup = ["$JS.API.INFO", `$JS.API.STREAM.INFO.${stream}`];
  const usageStreamOwner = [...usageStreamLookup, `$JS.API.STREAM.CREATE.${stream}`, `$JS.API.STREAM.UPDATE.${stream}`];
  return {
    // Publishes catalog changes and hears other replicas'; reads usage with a durable consumer of
    // its own (hosters' usage-report figures), on the stream billing made.
    registry: {
      publish: [names.catalogChanged, ...usageStreamLookup, ...consumerApi(names.hosterStatsConsumer)],
      subscribe: [names.catalogChanged, inbox("registry")],
      allowResponses: false,
    },
    // Owns the usage stream and settles it with its durable consumer; the only sender of lease
    // recalls (requests, answered on its inbox).
    billing: {
      publish: [names.leaseRecall("*"), ...usageStreamOwner, ...consumerApi(consumer)],
      subscribe: [inbox("billing")],
      allowResponses: false,
    },
    // The only publisher of key revocations.
    accounts: {
      publish: [names.keysRevoked],
      subscribe: [inbox("accounts")],
      allowResponses: false,
    },
    // Publishes only usage.completed (the answers it relayed, a JetStream publish acked on its
    // inbox); listens for revocations, catalog changes and its recalls (every edge's, as all edges
    // are one user), and answers recalls on their reply subjects only.
    edge: {
      publish: [names.usageCompleted],
      subscribe: [names.keysRevoked, names.catalogChanged, names.leaseRecall("*"), inbox("edge")],
      allowResponses: true,
    },
  };
}
