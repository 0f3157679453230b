import { describe, expect, it } from "vitest";
import { AppError, ERROR_CODES, type ErrorCode } from "@mkt/runtime/errors";
import { Route } from "@mkt/proto/registry/v1/registry";
import { UpstreamFailure } from "../src/relay/stream-chat.ts";
import { EndpointSteps } from "../src/routing/endpoint-steps.ts";
import { FAILURE_OWNERS, failureOwner, movesOn } from "../src/routing/next-endpoint.ts";

// The one failover rule (docs/routing.md, "One order per request, and failover"): which failures
// move a request to its next endpoint before the first byte, at admission and in the relay alike.

const error = (code: ErrorCode) => new AppError(code, code);
const OPEN_PLAN = { endpointPlan: true, reachedClient: false };
const NO_PLAN = { endpointPlan: false, reachedClient: false };

/** failure, then: moves on from an open endpoint's own plan, moves on from any other route. */
const TABLE: Array<[string, unknown, boolean, boolean]> = [
  // The endpoint's servers: another endpoint (or the next model) may answer.
  ["upstream 500", new UpstreamFailure("upstream_error", "upstream status 500", 500), true, true],
  ["upstream reset", new UpstreamFailure("upstream_error", "socket hang up"), true, true],
  ["upstream timeout", new UpstreamFailure("upstream_timeout", "first byte"), true, true],
  ["no live server", error("no_healthy_upstream"), true, true],
  // The endpoint's plan: passed over when the request took that plan's room, never on a scoped
  // key's own subscription (refused on one route, refused on all).
  ["plan paused", error("subscription_paused"), true, false],
  ["subscription to the plan past due", error("subscription_past_due"), true, false],
  ["implicit subscription cancelled", error("forbidden"), true, false],
  ["plan's minute full", error("rate_limit_exceeded"), true, false],
  ["plan's slots full", error("concurrency_limit_exceeded"), true, false],
  ["plan's included tokens used", error("included_tokens_exhausted"), true, false],
  ["plan gone", error("not_found"), true, false],
  // The account's: every endpoint charges the same wallet and key.
  ["no credit", error("insufficient_credits"), false, false],
  ["key's spend limit", error("key_limit_exceeded"), false, false],
  ["key revoked", error("invalid_api_key"), false, false],
  // The request's: another server would refuse it too, and a caller must not eject servers at will.
  ["upstream 400", new UpstreamFailure("upstream_error", "upstream status 400", 400), false, false],
  ["upstream 422", new UpstreamFailure("upstream_error", "upstream status 422", 422), false, false],
  ["client left", new UpstreamFailure("client_cancelled", "caller cancelled"), false, false],
  ["bad body", error("invalid_request"), false, false],
  ["prompt too long", error("context_length_exceeded"), false, false],
  // The edge's: billing out of reach or the edge superseded is the same on every endpoint.
  ["billing unreachable", error("service_unavailable"), false, false],
  ["edge superseded", error("edge_superseded"), false, false],
  ["edge bug", error("internal_error"), false, false],
  ["not an AppError", new TypeError("x is undefined"), false, false],
];

describe("the failover rule", () => {
  it.each(TABLE)("%s: moves on from an open plan %s, from another route %s", (_name, err, open, other) => {
    expect(movesOn(err, OPEN_PLAN)).toBe(open);
    expect(movesOn(err, NO_PLAN)).toBe(other);
  });

  it("never moves on once the answer reached the client", () => {
    for (const [, err] of TABLE) {
      expect(movesOn(err, { endpointPlan: true, reachedClient: true })).toBe(false);
      expect(movesOn(err, { endpointPlan: false, reachedClient: true })).toBe(false);
    }
  });

  it("names an owner for every error code", () => {
    expect(Object.keys(FAILURE_OWNERS).sort()).toEqual(Object.keys(ERROR_CODES).sort());
    expect(failureOwner(error("subscription_past_due"))).toBe("plan");
    expect(failureOwner(error("insufficient_credits"))).toBe("account");
  });
});

const route = (productId: string, open = true) =>
  Route.fromPartial({ provider: "hoster", hosterId: `h-${productId}`, modelId: `m-${productId}`, productId, open });

describe("one request's endpoint steps", () => {
  it("admits on the first endpoint whose plan admits, with the endpoints left after it", async () => {
    const steps = new EndpointSteps([route("a"), route("b"), route("c")], { subscriptionId: "" });
    const asked: string[][] = [];
    const admitted = await steps.admitOnFirst(async (routes) => {
      asked.push(routes.map((r) => r.productId));
      if (routes[0]!.productId === "a") throw error("subscription_paused");
      return "ticket";
    });
    expect(admitted).toBe("ticket");
    expect(asked).toEqual([
      ["a", "b", "c"],
      ["b", "c"],
    ]);
    expect(steps.routes.map((r) => r.productId)).toEqual(["b", "c"]);
  });

  it("answers with the account's refusal at once, and with the last endpoint's", async () => {
    const steps = new EndpointSteps([route("a"), route("b")], { subscriptionId: "" });
    let calls = 0;
    await expect(
      steps.admitOnFirst(() => {
        calls++;
        return Promise.reject(error("insufficient_credits"));
      }),
    ).rejects.toMatchObject({ code: "insufficient_credits" });
    expect(calls).toBe(1);

    const last = new EndpointSteps([route("a"), route("b")], { subscriptionId: "" });
    await expect(
      last.admitOnFirst((routes) => Promise.reject(error(routes.length === 2 ? "forbidden" : "rate_limit_exceeded"))),
    ).rejects.toMatchObject({ code: "rate_limit_exceeded" });
  });

  it("does not pass a scoped key's subscription refusal on to its other routes", async () => {
    const steps = new EndpointSteps([route("a"), route("b")], { subscriptionId: "sub-1" });
    await expect(steps.admitOnFirst(() => Promise.reject(error("concurrency_limit_exceeded")))).rejects.toMatchObject({
      code: "concurrency_limit_exceeded",
    });
    expect(steps.routes).toHaveLength(2);
    expect(steps.enterHook({ moveToPlan: () => Promise.resolve() }, undefined as never, { subscriptionId: "" })).toBe(
      undefined,
    );
  });

  it("keeps what the fit kept, in the order drawn", () => {
    const [a, b, c] = [route("a"), route("b"), route("c")];
    const steps = new EndpointSteps([a, b, c], { subscriptionId: "" });
    steps.keep([c, a]);
    expect(steps.routes).toEqual([a, c]);
  });
});
