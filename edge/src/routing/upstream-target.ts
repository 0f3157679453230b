import type { Route } from "@mkt/proto/registry/v1/registry";

/**
 * Who runs an upstream server: `platform` servers are configured by the operator (the local model
 * server, the cloud API) and called as they are; `hoster` servers belong to third parties and are
 * called only through the guarded connector, which refuses private and metadata addresses at
 * connect time.
 */
export type UpstreamTrust = "platform" | "hoster";

/**
 * Where and how to call a model, from registry's routing table: the server's base URL, its bearer
 * token (held in memory only: never logged, never in an error or a metric) and its model name.
 */
export interface UpstreamTarget {
  /** Base URL of an OpenAI-compatible server; `/v1/chat/completions` is appended. */
  baseUrl: string;
  token: string;
  upstreamModel: string;
  trust: UpstreamTrust;
  /**
   * Names the server for outlier ejection: `<provider> <url> <model id>` for a platform server's
   * model, `hoster <id>` for a hoster. Logged and used as a key; never holds the token.
   */
  key: string;
}

/** The servers of routes, in the order to try them (the routing table). */
export interface UpstreamDirectory {
  /**
   * The servers able to serve `route` now: each serves the route's very model at the route's
   * price (failover never changes the price a request was admitted at). Ejected servers are
   * included (the caller skips them); empty when the model is gone or its hoster unhealthy.
   */
  candidatesFor(route: Route): UpstreamTarget[];
}

/** Whether an upstream is ejected for now (the relay's outlier tracker); the routing table only reads it. */
export interface EjectionView {
  isEjected(key: string): boolean;
}
