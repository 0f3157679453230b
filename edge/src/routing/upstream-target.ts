import type { Route } from "@mkt/proto/registry/v1/registry";

/**
 * Who runs an upstream server: `platform` servers are configured by the operator (the local model
 * server, the cloud API) and called as they are; `hoster` servers belong to third parties and are
 * called only through the guarded connector, which refuses private and metadata addresses at
 * connect time.
 */
export type UpstreamTrust = "platform" | "hoster";

/**
 * Where and how to call a model, from registry's routing table: an OpenAI-compatible server's base
 * URL (`/v1/chat/completions` is appended), its bearer token and the name it knows the model by.
 * `key` names the server for outlier ejection and logs (`<provider> <origin+path> <model id>`, or
 * `hoster <id>`) and never holds the token. The token lives in the edge's memory only: never in a
 * log line, an error, a metric or a response.
 */
export interface UpstreamTarget {
  baseUrl: string;
  token: string;
  upstreamModel: string;
  trust: UpstreamTrust;
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
