import { status as GrpcStatus } from "@grpc/grpc-js";
import { AppError } from "./errors.ts";

/** Socket errors of a dependency that is down, restarting or unreachable (node's `err.code`). */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "ENOTFOUND",
]);

/**
 * PostgreSQL's SQLSTATEs for "not now" rather than "wrong": connection exceptions (class 08),
 * the server shutting down or crashing (57P01, 57P02), starting up (57P03), too many
 * connections (53300).
 */
function isUnavailableSqlState(code: string): boolean {
  return code.startsWith("08") || code === "57P01" || code === "57P02" || code === "57P03" || code === "53300";
}

/**
 * node-postgres's own words for a connection lost mid-query or unusable after an earlier loss,
 * which come without a code.
 */
const PG_CONNECTION_MESSAGES = [
  /^Connection terminated/,
  /is not queryable/,
  /timeout exceeded when trying to connect/,
  /Client was closed and is not queryable/,
];

/** nats.js errors of a connection that is down, reconnecting or closed. */
const NATS_CONNECTION_ERRORS = new Set(["ConnectionError", "ClosedConnectionError", "DrainingConnectionError"]);

interface ErrorLike {
  name?: unknown;
  code?: unknown;
  message?: unknown;
  cause?: unknown;
  errors?: unknown;
  metadata?: unknown;
}

function isOutageItself(e: ErrorLike): boolean {
  if (typeof e.code === "string" && (NETWORK_CODES.has(e.code) || isUnavailableSqlState(e.code))) return true;
  // A gRPC call to another service that is down (grpc-js puts a Metadata on every ServiceError).
  if (e.code === GrpcStatus.UNAVAILABLE && e.metadata !== undefined) return true;
  if (typeof e.name === "string" && NATS_CONNECTION_ERRORS.has(e.name)) return true;
  const message = typeof e.message === "string" ? e.message : "";
  return PG_CONNECTION_MESSAGES.some((pattern) => pattern.test(message));
}

/**
 * True when `err` says a dependency (PostgreSQL, NATS, another service) is unavailable rather
 * than that the request or the code is wrong: a failure to answer with a 503 and `retry-after`,
 * not a 500 (docs/adr/0027-dependency-outage-is-503.md). Looks through wrappers (MikroORM's
 * DriverException keeps the driver's code; others chain `cause`; a connection to several addresses
 * fails with an AggregateError).
 */
export function isDependencyOutage(err: unknown): boolean {
  const seen = new Set<unknown>();
  const pending: unknown[] = [err];
  while (pending.length > 0) {
    const e = pending.pop();
    if (typeof e !== "object" || e === null || seen.has(e)) continue;
    seen.add(e);
    const candidate = e as ErrorLike;
    if (isOutageItself(candidate)) return true;
    pending.push(candidate.cause);
    if (Array.isArray(candidate.errors)) pending.push(...(candidate.errors as unknown[]));
  }
  return false;
}

/** The caller's answer to a dependency outage: 503 `service_unavailable` with `retry-after`; `cause` is logged only. */
export function dependencyUnavailable(cause: unknown): AppError {
  return new AppError("service_unavailable", "A dependency of the service is unavailable; retry shortly.", { cause });
}
