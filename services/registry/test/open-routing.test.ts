import { describe, expect, it } from "vitest";
import { EndpointFigures, type EndpointStats, type ProductTerms } from "@mkt/proto/registry/v1/registry";
import { fallbackReason, openModels } from "../src/catalog/open-routing.ts";
import type { RoutableHoster } from "../src/hosters/hoster-store.ts";
import type { StoredProduct } from "../src/products/product-store.ts";

const window = (successes: number, faults: number): EndpointStats => {
  const figures = EndpointFigures.fromPartial({
    requests: BigInt(successes + faults),
    successes: BigInt(successes),
    faults: BigInt(faults),
    uptime: successes + faults > 0 ? successes / (successes + faults) : undefined,
  });
  return { last30m: figures, last1d: figures, hours: [] };
};

function hoster(id: string, status: "healthy" | "unhealthy", canonicalId: string, kind = "chat"): RoutableHoster {
  return {
    id,
    name: `Hoster ${id.slice(0, 1)}`,
    endpointUrl: "https://h.example",
    apiKeySealed: "",
    status,
    createdAt: new Date(0),
    models: [
      {
        modelId: `m-${id.slice(0, 1)}`,
        modelAlias: "",
        contextWindow: 8192n,
        kind,
        maxN: 1n,
        canonicalId,
        quantization: "bf16",
      },
    ],
  };
}

function plan(hosterId: string, pricePer1mUsd: number, open = true): StoredProduct {
  const half = BigInt(Math.round((pricePer1mUsd / 2) * 1_000_000));
  return {
    id: `${hosterId}-plan`,
    hosterId,
    status: "active",
    createdAt: new Date(0),
    updatedAt: new Date(0),
    terms: {
      name: "p",
      pricingModel: "payg",
      inputPricePer1mMicros: half,
      outputPricePer1mMicros: half,
      maxContextTokens: 4096n,
      maxOutputTokens: 1024n,
      open,
    } as ProductTerms,
  };
}

describe("the default routing rule (registry's part)", () => {
  it("makes an endpoint a fallback when degraded, or below 80% uptime over 30 minutes once 20 are judged", () => {
    expect(fallbackReason(window(15, 4), undefined)).toBeUndefined(); // 79% of 19: too few to judge
    expect(fallbackReason(window(16, 4), undefined)).toBeUndefined(); // 80%
    expect(fallbackReason(window(14, 6), undefined)).toBe("low_uptime"); // 70% of 20
    expect(fallbackReason(window(100, 0), { status: "degraded", lastRunAt: "", checks: [] })).toBe("degraded");
    expect(fallbackReason(undefined, { status: "verified", lastRunAt: "", checks: [] })).toBeUndefined();
  });

  it("lists healthy chat endpoints on open plans, weighted 1 / price², free first, fallbacks last", () => {
    const hosters = [
      hoster("1aaaaaaa-0000-4000-8000-000000000000", "healthy", "acme/x"),
      hoster("2bbbbbbb-0000-4000-8000-000000000000", "healthy", "ACME/x"),
      hoster("3ccccccc-0000-4000-8000-000000000000", "healthy", "acme/x"),
      hoster("4ddddddd-0000-4000-8000-000000000000", "unhealthy", "acme/x"),
      hoster("5eeeeeee-0000-4000-8000-000000000000", "healthy", "acme/x", "embedding"),
      hoster("6fffffff-0000-4000-8000-000000000000", "healthy", "acme/x"),
    ];
    const plans = new Map([
      [hosters[0]!.id, [plan(hosters[0]!.id, 2)]],
      [hosters[1]!.id, [plan(hosters[1]!.id, 0)]],
      [hosters[2]!.id, [plan(hosters[2]!.id, 1)]],
      [hosters[3]!.id, [plan(hosters[3]!.id, 1)]],
      [hosters[4]!.id, [plan(hosters[4]!.id, 1)]],
      [hosters[5]!.id, [plan(hosters[5]!.id, 0.5, false)]],
    ]);
    const stats = new Map([[`${hosters[2]!.id}/m-3`, window(10, 20)]]);
    const [model, ...others] = openModels({ hosters, plans, stats, verdicts: new Map() });
    expect(others).toEqual([]);
    expect(model!.canonicalId).toBe("acme/x");
    expect(model!.endpoints.map((e) => [e.modelId, e.tier, e.weight])).toEqual([
      ["m-2", "primary", 0],
      ["m-1", "primary", 0.25],
      ["m-3", "fallback", 0],
    ]);
    expect(model!.endpoints[1]).toMatchObject({
      contextWindow: 4096n,
      maxOutputTokens: 1024n,
      productId: `${hosters[0]!.id}-plan`,
    });
  });

  it("puts the plan's cached-input price on its endpoint, and weighs the endpoint by its fresh prices alone", () => {
    const hosters = [
      hoster("1aaaaaaa-0000-4000-8000-000000000000", "healthy", "acme/x"),
      hoster("2bbbbbbb-0000-4000-8000-000000000000", "healthy", "acme/x"),
    ];
    const discounted = plan(hosters[0]!.id, 2);
    discounted.terms = { ...discounted.terms, cachedInputPricePer1mMicros: 100_000n };
    const plans = new Map([
      [hosters[0]!.id, [discounted]],
      [hosters[1]!.id, [plan(hosters[1]!.id, 2)]],
    ]);
    const [model] = openModels({ hosters, plans, stats: new Map(), verdicts: new Map() });
    expect(model!.endpoints.map((e) => [e.modelId, e.cachedInputPricePer1mMicros, e.weight])).toEqual([
      ["m-1", 100_000n, 0.25],
      ["m-2", undefined, 0.25],
    ]);
  });
});
