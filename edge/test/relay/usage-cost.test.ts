import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros, microsToUsd } from "@mkt/runtime/money";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { eventJson, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";

// The answer's usage.cost (docs/adr/0017-one-cost-function.md): what settlement will post for the
// billed tokens, by the one cost function, from the route's prices or the subscription's terms the
// edge passes, at most the admitted worst case. That settlement posts the same amount:
// test/e2e/usage-cost.test.ts.

let h: Harness;
beforeAll(async () => {
  h = await startRelayHarness();
});
afterAll(async () => {
  await h?.close();
});

type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number; cost: number };

/** The usage object the caller got: the non-streamed completion's, or a stream's last chunk's. */
async function answerUsage(request: RelayRequest): Promise<Usage> {
  const { events, error } = await h.chat(request);
  expect(error).toBeUndefined();
  return eventJson(events.at(-1)!).usage as Usage;
}

async function usageEvent(request: RelayRequest): Promise<UsageCompleted> {
  const [event] = await waitFor(
    () => h.published.filter((e) => e.requestId === request.requestId),
    (found) => found.length > 0,
  );
  return event!;
}

const routePrice = (u: Usage) => costMicros(BigInt(u.prompt_tokens), BigInt(u.completion_tokens), 500_000n, 1_500_000n);

describe("usage.cost of an account key's request", () => {
  it.each([
    ["non-streamed", { stream: false }],
    ["streamed, with include_usage", { stream: true, includeUsage: true }],
  ])("%s: the tokens at the route's prices", async (_, mode) => {
    const request = await h.chatRequest("demo-small", { ...mode, worstCaseMicros: 10_000n });
    const usage = await answerUsage(request);
    expect(usage.completion_tokens).toBeGreaterThan(0);
    expect(routePrice(usage)).toBeGreaterThan(0n);
    expect(usage.cost).toBe(microsToUsd(routePrice(usage)));
  });

  it("is never more than the worst case the request was admitted with", async () => {
    const request = await h.chatRequest("demo-small", { stream: false, worstCaseMicros: 3n });
    const usage = await answerUsage(request);
    expect(routePrice(usage)).toBeGreaterThan(3n);
    expect(usage.cost).toBe(0.000003);
  });
});

describe("usage.cost of a subscription's request: its terms, not the route's prices", () => {
  const terms = {
    inputPricePer1mMicros: 7_000_000n,
    outputPricePer1mMicros: 9_000_000n,
    overagePricePer1mMicros: 2_000_000n,
  };

  it("payg: the plan's per-1M prices", async () => {
    const request = await h.chatRequest("demo-small", {
      stream: false,
      worstCaseMicros: 10_000n,
      subscriptionPricing: { pricingModel: "payg", ...terms },
    });
    const usage = await answerUsage(request);
    const expected = costMicros(BigInt(usage.prompt_tokens), BigInt(usage.completion_tokens), 7_000_000n, 9_000_000n);
    expect(usage.cost).toBe(microsToUsd(expected));
  });

  it("subscription and free: nothing", async () => {
    for (const pricingModel of ["subscription", "free"]) {
      const request = await h.chatRequest("demo-small", {
        stream: false,
        worstCaseMicros: 10_000n,
        includedTokens: 120n,
        subscriptionPricing: { pricingModel, ...terms },
      });
      expect((await answerUsage(request)).cost).toBe(0);
    }
  });

  it("subscription_overage: the overage price on the tokens beyond those it took at admission, which the event carries", async () => {
    const request = await h.chatRequest("demo-small", {
      stream: true,
      includeUsage: true,
      worstCaseMicros: 10_000n,
      includedTokens: 10n,
      subscriptionPricing: { pricingModel: "subscription_overage", ...terms },
    });
    const usage = await answerUsage(request);
    expect(usage.total_tokens).toBeGreaterThan(10);
    // 2 micro-USD a token beyond the 10 included.
    expect(usage.cost).toBe(microsToUsd(2n * BigInt(usage.total_tokens - 10)));
    expect(await usageEvent(request)).toMatchObject({ includedTokens: 10n, worstCaseMicros: 10_000n });

    const within = await h.chatRequest("demo-small", {
      stream: false,
      worstCaseMicros: 0n,
      includedTokens: 120n,
      subscriptionPricing: { pricingModel: "subscription_overage", ...terms },
    });
    expect((await answerUsage(within)).cost).toBe(0);
  });
});
