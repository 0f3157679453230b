import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import {
  AuthorizeRequest,
  AuthorizeResponse,
  type AuthorizeBatchRequest,
  type AuthorizeBatchResponse,
} from "@mkt/proto/billing/v1/billing";
import { AuthorizeBatcher } from "../src/chat/authorize-batcher.ts";

/** A billing stand-in whose AuthorizeBatch calls stay open until the test answers them. */
function billingDouble() {
  const calls: Array<{ request: AuthorizeBatchRequest; answer(res: AuthorizeBatchResponse | Error): void }> = [];
  return {
    calls,
    authorizeBatch: (request: AuthorizeBatchRequest) =>
      new Promise<AuthorizeBatchResponse>((resolve, reject) => {
        calls.push({ request, answer: (res) => (res instanceof Error ? reject(res) : resolve(res)) });
      }),
  };
}

const req = (requestId: string) => AuthorizeRequest.fromPartial({ requestId });
const grant = (reservationId: string) => ({ grant: AuthorizeResponse.fromPartial({ reservationId }) });
const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("AuthorizeBatcher", () => {
  it("sends at once when idle and batches what arrives while calls are in flight", async () => {
    const billing = billingDouble();
    const batcher = new AuthorizeBatcher(billing, { maxInFlight: 1, maxBatch: 2 });
    const first = batcher.authorize(req("a"));
    const rest = ["b", "c", "d"].map((id) => batcher.authorize(req(id)));
    await tick();
    expect(billing.calls.map((c) => c.request.requests.map((r) => r.requestId))).toEqual([["a"]]);
    billing.calls[0]!.answer({ results: [grant("r-a")] });
    expect((await first).reservationId).toBe("r-a");
    await tick();
    // The next call carries the queue, up to maxBatch; the rest waits for it.
    expect(billing.calls[1]!.request.requests.map((r) => r.requestId)).toEqual(["b", "c"]);
    expect(billing.calls).toHaveLength(2);
    billing.calls[1]!.answer({
      results: [
        grant("r-b"),
        {
          refusal: {
            code: "rate_limit_exceeded",
            message: "Rate limit reached.",
            param: "",
            headers: { "retry-after": "7" },
          },
        },
      ],
    });
    expect((await rest[0]!).reservationId).toBe("r-b");
    const refused = await rest[1]!.catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(AppError);
    expect(refused).toMatchObject({ code: "rate_limit_exceeded", headers: { "retry-after": "7" }, param: undefined });
    await tick();
    expect(billing.calls[2]!.request.requests.map((r) => r.requestId)).toEqual(["d"]);
    billing.calls[2]!.answer({ results: [grant("r-d")] });
    expect((await rest[2]!).reservationId).toBe("r-d");
  });

  it("fails every request of a call that fails, and keeps serving later ones", async () => {
    const billing = billingDouble();
    const batcher = new AuthorizeBatcher(billing, { maxInFlight: 2, maxBatch: 10 });
    const [a, b] = [batcher.authorize(req("a")), batcher.authorize(req("b"))];
    await tick();
    expect(billing.calls).toHaveLength(2); // two calls may be in flight at once
    const down = new AppError("service_unavailable", "A backend service is unavailable; try again shortly.");
    billing.calls[0]!.answer(down);
    billing.calls[1]!.answer({ results: [] }); // an answer without a result is an internal error
    await expect(a).rejects.toBe(down);
    await expect(b).rejects.toMatchObject({ code: "internal_error" });
    const c = batcher.authorize(req("c"));
    await tick();
    billing.calls[2]!.answer({ results: [grant("r-c")] });
    expect((await c).reservationId).toBe("r-c");
  });
});
