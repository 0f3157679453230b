import type { onRequestAsyncHookHandler } from "fastify";
import type { Backends } from "../backends.ts";
import type { PromptTokenCounter } from "../chat/prompt-tokens.ts";
import type { LeaseTable } from "../leases/lease-table.ts";
import type { RoutingTable } from "../routing/routing-table.ts";
import type { IsolationWatch } from "../leases/isolation-watch.ts";
import type { ChatMetrics } from "../plugins/metrics.ts";
import type { RelayDeps } from "../relay/relay-answer.ts";
import type { ApiKeyAuthOptions } from "../plugins/api-key-auth.ts";
import type { SessionKind } from "../plugins/session-auth.ts";

/** What route modules are given by the app. */
export interface RouteDeps {
  backends: Backends;
  promptTokens: PromptTokenCounter;
  /** The edge's admission leases: chat requests are admitted against them. */
  leases: LeaseTable;
  /** Registry's routing table, kept current by WatchCatalog: chat routes resolve from it. */
  routing: RoutingTable;
  /** The relay to the upstreams of that table. */
  relay: RelayDeps;
  /** The chat route's steps, exposed at GET /metrics. */
  chatMetrics: ChatMetrics;
  /** Aborts when the shutdown grace period is over: answers still running end with an error event. */
  shutdown: AbortSignal;
  /** Its signal aborts when the edge is cut off from billing too long: answers still running end with an error event. */
  isolation: IsolationWatch;
  /** The API-key onRequest hook (`request.principal`). */
  auth(options: ApiKeyAuthOptions): onRequestAsyncHookHandler;
  /** The session-cookie onRequest hook (`request.session`) for one kind of login. */
  session(kind: SessionKind): onRequestAsyncHookHandler;
}
