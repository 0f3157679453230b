import type { Route } from "@mkt/proto/registry/v1/registry";

/**
 * A subscription's prices (its terms snapshot) for the answer's `usage.cost`: what settlement will
 * charge, computed with the same function.
 */
export interface SubscriptionPricing {
  /** free | payg | subscription | subscription_overage */
  pricingModel: string;
  inputPricePer1mMicros: bigint;
  outputPricePer1mMicros: bigint;
  overagePricePer1mMicros: bigint;
  /** payg: cached input tokens' price; subscription_overage: cached overage tokens'. Absent: the input (overage) price. */
  cachedInputPricePer1mMicros?: bigint | undefined;
}

/** One admitted chat request, as the relay calls it upstream and meters it. */
export interface RelayRequest {
  /** Ours: the completion id (`chatcmpl-<id>`) and the usage event's Nats-Msg-Id. */
  requestId: string;
  accountId: string;
  keyId: string;
  /** The first model's route; then the client's fallbacks (`models`), tried in order before the first byte. */
  route: Route;
  fallbackRoutes: Route[];
  /** The client's JSON body (model and output cap are rewritten for the upstream). */
  body: Uint8Array;
  stream: boolean;
  /** stream_options.include_usage: a final usage chunk for the client. */
  includeUsage: boolean;
  /** The output cap the request was admitted with, per choice. */
  maxOutputTokens: bigint;
  /**
   * Prompt tokens, an upper bound on billed input tokens: counted at admission, or still being
   * counted beside the answer (the relay waits for it before it computes the usage).
   */
  promptTokens: bigint | Promise<bigint>;
  /** Unix milliseconds when the edge received the request (for latency). */
  receivedAtMs: bigint;
  /** The client's `n` (0 means 1): billed output is capped at maxOutputTokens × choices. */
  choices: bigint;
  /** The lease that admitted it, and the worst case taken from it (credit, tokens). */
  leaseId: string;
  worstCaseMicros: bigint;
  worstCaseTokens: bigint;
  /**
   * The subscription whose budget admitted it ('' for the account's own): for an open endpoint,
   * the account's subscription to its plan, which `enterRoute` changes when another one serves it.
   */
  subscriptionId: string;
  /**
   * Called before each route is tried, the first included: moves the request's plan room to an
   * open endpoint's plan (EndpointSteps' hook). Whether its refusal passes the route over or is
   * the answer is the one failover rule's to say (`movesOn`, edge/src/routing/next-endpoint.ts).
   */
  enterRoute?: (route: Route) => Promise<void>;
  /** Included tokens taken from the subscription's budget at admission (overage plans). */
  includedTokens: bigint;
  /** A scoped key's request is priced by its subscription's terms; unset for an account key's. */
  subscriptionPricing?: SubscriptionPricing;
}
