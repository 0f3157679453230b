import { AppError, type ErrorCode } from "@mkt/runtime/errors";
import { UpstreamFailure } from "../relay/stream-chat.ts";
import { isUpstreamFault } from "../relay/upstream-failover.ts";

/**
 * Whose failure an error is. Only the endpoint's own failures can be cured by another endpoint:
 * its servers (down, failing, timing out) and, for a request that took the endpoint's own plan
 * room, that plan's refusals. The account's credit and key, the request itself and the edge's
 * own state would fail the same way on every endpoint, so they are the answer.
 */
export type FailureOwner = "servers" | "plan" | "account" | "request" | "edge";

/**
 * Every error code's owner (docs/routing.md, "One order per request, and failover"). A plan's
 * refusals are the plan's pause, the account's subscription to it (cancelled: `forbidden`;
 * unpaid: `subscription_past_due`), its limits, and the plan or its model gone from billing; the
 * account's are its credit, its key's spend limit and its authentication. `service_unavailable` is the edge's: billing or the lease
 * cannot be reached, which no other endpoint changes (and asking again would only load billing).
 */
export const FAILURE_OWNERS: Readonly<Record<ErrorCode, FailureOwner>> = {
  invalid_request: "request",
  context_length_exceeded: "request",
  request_too_large: "request",
  invalid_api_key: "account",
  invalid_credentials: "account",
  unauthenticated: "account",
  insufficient_credits: "account",
  key_limit_exceeded: "account",
  subscription_past_due: "plan",
  subscription_paused: "plan",
  forbidden: "plan",
  model_not_found: "plan",
  not_found: "plan",
  email_taken: "request",
  already_subscribed: "request",
  idempotency_conflict: "request",
  rate_limit_exceeded: "plan",
  concurrency_limit_exceeded: "plan",
  included_tokens_exhausted: "plan",
  internal_error: "edge",
  upstream_error: "servers",
  no_healthy_upstream: "servers",
  service_unavailable: "edge",
  edge_superseded: "edge",
  upstream_timeout: "servers",
};

/**
 * An upstream call's failure is its servers' when it is their fault (upstream-failover.ts); a
 * client that left, or a body the upstream refused as invalid, is the request's. Anything that is
 * neither an AppError nor an upstream failure is a bug of the edge's.
 */
export function failureOwner(err: unknown): FailureOwner {
  if (err instanceof UpstreamFailure) return isUpstreamFault(err) ? "servers" : "request";
  if (err instanceof AppError) return FAILURE_OWNERS[err.code];
  return "edge";
}

/** Where a request stood when its endpoint failed. */
export interface FailedAt {
  /**
   * The request holds the room of this endpoint's own plan: an account key's request to an open
   * endpoint. A scoped key's plan is its subscription's, the same on every route it may take.
   */
  endpointPlan: boolean;
  /** Some of the answer reached the client (a 200 and chunks): nothing moves after that. */
  reachedClient: boolean;
}

/**
 * The one rule of failover, at admission and in the relay alike: true when the request moves on
 * to its next endpoint (when it has one) instead of answering with `err`. Only before the first
 * byte, and only for the endpoint's own failures: its servers', or its plan's when the request
 * took that plan's room.
 */
export function movesOn(err: unknown, at: FailedAt): boolean {
  if (at.reachedClient) return false;
  const owner = failureOwner(err);
  return owner === "servers" || (owner === "plan" && at.endpointPlan);
}
