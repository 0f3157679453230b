import type { PromiseClient } from "@mkt/runtime/grpc-client";
import { AppError } from "@mkt/runtime/errors";
import type { AuthorizeRequest, AuthorizeResponse, BillingServiceClient } from "@mkt/proto/billing/v1/billing";

interface Waiting {
  request: AuthorizeRequest;
  resolve(grant: AuthorizeResponse): void;
  reject(err: unknown): void;
}

/**
 * The edge's Authorize: one AuthorizeBatch call carries every request that arrived while the
 * previous calls were in flight (DESIGN.md §2, "one Authorize round trip"). An idle edge sends
 * each request at once, so batching adds no wait; a loaded one sends a few calls carrying dozens
 * of requests, which billing answers with one transaction each instead of one per request.
 */
export class AuthorizeBatcher {
  readonly #billing: Pick<PromiseClient<BillingServiceClient>, "authorizeBatch">;
  readonly #maxInFlight: number;
  readonly #maxBatch: number;
  #queue: Waiting[] = [];
  #inFlight = 0;

  constructor(
    billing: Pick<PromiseClient<BillingServiceClient>, "authorizeBatch">,
    options: { maxInFlight: number; maxBatch: number },
  ) {
    this.#billing = billing;
    this.#maxInFlight = options.maxInFlight;
    this.#maxBatch = options.maxBatch;
  }

  /** The grant for `request`, or its refusal as an AppError (as the unary Authorize would). */
  authorize(request: AuthorizeRequest): Promise<AuthorizeResponse> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ request, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch);
      this.#inFlight++;
      this.#billing
        .authorizeBatch({ requests: batch.map((w) => w.request) })
        .then(
          ({ results }) =>
            batch.forEach((waiting, i) => {
              const result = results[i];
              if (result?.grant) waiting.resolve(result.grant);
              else if (result?.refusal) waiting.reject(AppError.fromData(result.refusal));
              else waiting.reject(new AppError("internal_error", "Internal error.", { cause: "no result" }));
            }),
          (err: unknown) => batch.forEach((waiting) => waiting.reject(err)),
        )
        .finally(() => {
          this.#inFlight--;
          this.#pump();
        });
    }
  }
}
