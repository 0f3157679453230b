import { Metadata, status as GrpcStatus, type ServiceError } from "@grpc/grpc-js";

/**
 * The one table of error codes (docs/adr/0005-openai-error-shape.md). Services throw
 * `AppError(code)`; the code travels in gRPC metadata (`mk-error-code`) and the edge renders it as
 * an OpenAI-shaped HTTP error. HTTP statuses never travel in gRPC codes: each entry names both
 * independently.
 */
export const ERROR_CODES = {
  invalid_request: { http: 400, type: "invalid_request_error", grpc: GrpcStatus.INVALID_ARGUMENT },
  context_length_exceeded: { http: 400, type: "invalid_request_error", grpc: GrpcStatus.INVALID_ARGUMENT },
  request_too_large: { http: 413, type: "invalid_request_error", grpc: GrpcStatus.INVALID_ARGUMENT },
  invalid_api_key: { http: 401, type: "authentication_error", grpc: GrpcStatus.UNAUTHENTICATED },
  invalid_credentials: { http: 401, type: "authentication_error", grpc: GrpcStatus.UNAUTHENTICATED },
  unauthenticated: { http: 401, type: "authentication_error", grpc: GrpcStatus.UNAUTHENTICATED },
  insufficient_credits: { http: 402, type: "insufficient_quota", grpc: GrpcStatus.FAILED_PRECONDITION },
  key_limit_exceeded: { http: 402, type: "insufficient_quota", grpc: GrpcStatus.FAILED_PRECONDITION },
  subscription_past_due: { http: 402, type: "insufficient_quota", grpc: GrpcStatus.FAILED_PRECONDITION },
  subscription_paused: { http: 403, type: "permission_error", grpc: GrpcStatus.PERMISSION_DENIED },
  forbidden: { http: 403, type: "permission_error", grpc: GrpcStatus.PERMISSION_DENIED },
  model_not_found: { http: 404, type: "invalid_request_error", grpc: GrpcStatus.NOT_FOUND },
  not_found: { http: 404, type: "invalid_request_error", grpc: GrpcStatus.NOT_FOUND },
  email_taken: { http: 409, type: "invalid_request_error", grpc: GrpcStatus.ALREADY_EXISTS },
  already_subscribed: { http: 409, type: "invalid_request_error", grpc: GrpcStatus.ALREADY_EXISTS },
  idempotency_conflict: { http: 409, type: "invalid_request_error", grpc: GrpcStatus.ALREADY_EXISTS },
  rate_limit_exceeded: { http: 429, type: "rate_limit_error", grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  concurrency_limit_exceeded: { http: 429, type: "rate_limit_error", grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  included_tokens_exhausted: { http: 429, type: "rate_limit_error", grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  internal_error: { http: 500, type: "api_error", grpc: GrpcStatus.INTERNAL },
  upstream_error: { http: 502, type: "api_error", grpc: GrpcStatus.UNAVAILABLE },
  no_healthy_upstream: { http: 503, type: "api_error", grpc: GrpcStatus.UNAVAILABLE },
  service_unavailable: { http: 503, type: "api_error", grpc: GrpcStatus.UNAVAILABLE },
  // Billing to an edge process whose EDGE_ID a newer process has taken (docs/leases.md,
  // "Incarnations"); the edge stops admitting and answers its clients service_unavailable.
  edge_superseded: { http: 503, type: "api_error", grpc: GrpcStatus.FAILED_PRECONDITION },
  upstream_timeout: { http: 504, type: "api_error", grpc: GrpcStatus.DEADLINE_EXCEEDED },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

/**
 * A 503 always says when to come back (docs/adr/0027-dependency-outage-is-503.md): a dependency
 * outage or a restarting upstream is over within seconds, so one second unless the thrower knows
 * better (a lease's TTL).
 */
const DEFAULT_RETRY_AFTER: Partial<Record<ErrorCode, string>> = {
  service_unavailable: "1",
  no_healthy_upstream: "1",
};

/** Fallback when a gRPC error carries no `mk-error-code` (docs/architecture.md#errors). */
const GRPC_FALLBACK: Partial<Record<GrpcStatus, ErrorCode>> = {
  [GrpcStatus.INVALID_ARGUMENT]: "invalid_request",
  [GrpcStatus.UNAUTHENTICATED]: "unauthenticated",
  [GrpcStatus.PERMISSION_DENIED]: "forbidden",
  [GrpcStatus.NOT_FOUND]: "not_found",
  [GrpcStatus.ALREADY_EXISTS]: "invalid_request",
  [GrpcStatus.RESOURCE_EXHAUSTED]: "rate_limit_exceeded",
  [GrpcStatus.UNAVAILABLE]: "service_unavailable",
  [GrpcStatus.DEADLINE_EXCEEDED]: "upstream_timeout",
};

const CODE_KEY = "mk-error-code";
const PARAM_KEY = "mk-error-param";
const HEADER_PREFIX = "mk-header-";

export interface AppErrorOptions {
  /** The request field at fault, rendered as `param`. */
  param?: string;
  /** HTTP headers the edge must send with the error (retry-after, x-ratelimit-*). */
  headers?: Record<string, string>;
  /** What went wrong underneath, for the log line only (never rendered to the caller). */
  cause?: unknown;
}

/** A typed, user-facing failure. Its message is safe to show to the caller. */
export class AppError extends Error {
  readonly code: ErrorCode;
  readonly param: string | undefined;
  readonly headers: Record<string, string>;

  constructor(code: ErrorCode, message: string, options: AppErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "AppError";
    this.code = code;
    this.param = options.param;
    const retryAfter = DEFAULT_RETRY_AFTER[code];
    this.headers = { ...(retryAfter === undefined ? {} : { "retry-after": retryAfter }), ...options.headers };
  }

  get httpStatus(): number {
    return ERROR_CODES[this.code].http;
  }

  get type(): string {
    return ERROR_CODES[this.code].type;
  }

  /** The OpenAI error body. */
  toBody(): { error: { message: string; type: string; param: string | null; code: string } } {
    return { error: { message: this.message, type: this.type, param: this.param ?? null, code: this.code } };
  }

  /** Encodes the error for a gRPC handler's callback / stream. */
  toGrpc(): Partial<ServiceError> {
    const metadata = new Metadata();
    metadata.set(CODE_KEY, this.code);
    if (this.param) metadata.set(PARAM_KEY, this.param);
    for (const [name, value] of Object.entries(this.headers)) metadata.set(HEADER_PREFIX + name, value);
    return { code: ERROR_CODES[this.code].grpc, details: this.message, metadata };
  }

  /** An error from a code received as data (a stream's error event); unknown codes are upstream errors. */
  static fromCode(code: string, message: string): AppError {
    return code in ERROR_CODES ? new AppError(code as ErrorCode, message) : new AppError("upstream_error", message);
  }

  /**
   * Decodes an error received from a gRPC call. Internal failures (no code, 5xx) get a generic
   * message, so a backend's internals never reach a client.
   */
  static fromGrpc(err: unknown): AppError {
    if (err instanceof AppError) return err;
    const e = err as Partial<ServiceError> | undefined;
    const metadata = e?.metadata;
    const raw = metadata?.get(CODE_KEY)[0]?.toString();
    if (raw && raw in ERROR_CODES) {
      const headers: Record<string, string> = {};
      for (const [key, values] of Object.entries(metadata!.getMap())) {
        if (key.startsWith(HEADER_PREFIX)) headers[key.slice(HEADER_PREFIX.length)] = String(values);
      }
      const param = metadata!.get(PARAM_KEY)[0]?.toString();
      return new AppError(raw as ErrorCode, e?.details ?? "", { param, headers });
    }
    const fallback = e?.code !== undefined ? GRPC_FALLBACK[e.code as GrpcStatus] : undefined;
    // The transport's own words (status and details) go to the log, not to the caller.
    const cause = { grpcCode: e?.code, details: e?.details };
    if (e?.code === GrpcStatus.CANCELLED)
      return new AppError("service_unavailable", "The request was cancelled.", { cause });
    if (fallback && ERROR_CODES[fallback].http < 500) return new AppError(fallback, e?.details ?? "Request refused.");
    if (fallback) return new AppError(fallback, "A backend service is unavailable; try again shortly.", { cause });
    return new AppError("internal_error", "Internal error.", { cause });
  }
}
