import { AppError } from "@mkt/runtime/errors";

/** Billing cannot be asked (down, or the lease changed underneath): retry shortly, never 402/429. */
export function unavailable(ttlMs: number, why: string, cause?: unknown): AppError {
  return new AppError("service_unavailable", "The service is temporarily unable to admit requests; please retry.", {
    headers: { "retry-after": String(Math.max(1, Math.ceil(ttlMs / 1000))) },
    cause: cause ?? why,
  });
}

/** A subscription ticket's lease is no longer the account's (takeWorstCase starts it again). */
export class LeaseGone extends Error {}
