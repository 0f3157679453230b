import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { CatalogTable, OpenEndpoint } from "@mkt/proto/registry/v1/registry";
import { OutlierTracker } from "../src/relay/outlier-tracker.ts";
import { ModelAliases } from "../src/routing/model-aliases.ts";
import { providerPreferences, type ProviderField } from "../src/routing/provider-preferences.ts";
import { RoutingTable } from "../src/routing/routing-table.ts";

const ids = [
  "11111111-1111-4111-8111-111111111111",
  "22222222-2222-4222-8222-222222222222",
  "44444444-4444-4444-8444-444444444444",
];
const CANONICAL = "acme/shared-8b";

/** Three hosters of one open model at 1, 2 and 4 USD per 1M tokens, weighted as registry weighs them. */
function table(extra: Partial<OpenEndpoint>[] = []): CatalogTable {
  const prices = [1, 2, 4];
  return CatalogTable.fromPartial({
    hosters: ids.map((hosterId, i) => ({
      hosterId,
      name: `Hoster ${prices[i]}`,
      status: "healthy",
      models: [{ modelId: `m${prices[i]}`, contextWindow: 8192n, canonicalId: CANONICAL }],
      endpointUrl: `https://h${i}.example`,
      token: "t",
      upstreamKey: `hoster ${hosterId}`,
    })),
    openModels: [
      {
        canonicalId: CANONICAL,
        endpoints: ids.map((hosterId, i) =>
          OpenEndpoint.fromPartial({
            hosterId,
            modelId: `m${prices[i]}`,
            productId: `p${prices[i]}`,
            inputPricePer1mMicros: BigInt(prices[i]! * 500_000),
            outputPricePer1mMicros: BigInt(prices[i]! * 500_000),
            contextWindow: 8192n,
            maxOutputTokens: 4096n,
            quantization: i === 1 ? "fp8" : "bf16",
            tier: "primary",
            weight: 1 / prices[i]! ** 2,
            latencyP50Ms: BigInt([900, 300, 600][i]!),
            tokensPerSecondP50: BigInt([20, 40, 80][i]!),
            maxN: 1n,
            ...extra[i],
          }),
        ),
      },
    ],
  });
}

/** A random source that walks [0, 1) in `n` even steps: the first draws then match the weights exactly. */
function evenSteps(n: number) {
  let i = 0;
  return () => ((i++ % n) + 0.5) / n;
}

function firstChoices(routing: RoutingTable, n: number, provider?: ProviderField) {
  const counts = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const [first] = routing.resolveRoutes(CANONICAL, undefined, "chat", providerPreferences(provider));
    counts.set(first!.modelId, (counts.get(first!.modelId) ?? 0) + 1);
  }
  return counts;
}

describe("open model routing at the edge", () => {
  it("draws the first endpoint with weights 1 / price²: exactly 16/21, 4/21, 1/21 with an even random source", () => {
    // Each request draws twice (three endpoints): the first draw of each request walks the steps.
    let request = 0;
    const draws = [0, 0];
    const random = () => {
      const value = draws[0] === 0 ? (request + 0.5) / 2100 : 0.5;
      draws[0] = (draws[0]! + 1) % 2;
      if (draws[0] === 0) request++;
      return value;
    };
    const routing = new RoutingTable(undefined, new ModelAliases(), random);
    routing.apply(table());
    const counts = firstChoices(routing, 2100);
    expect(Object.fromEntries(counts)).toEqual({ m1: 1600, m2: 400, m4: 100 });
  });

  it("puts every endpoint in the order, the rest as fallbacks, each route at its own plan's prices", () => {
    const routing = new RoutingTable(undefined, new ModelAliases(), evenSteps(7));
    routing.apply(table());
    const routes = routing.resolveRoutes(CANONICAL, undefined);
    expect(routes.map((r) => r.modelId).sort()).toEqual(["m1", "m2", "m4"]);
    for (const r of routes) {
      expect(r).toMatchObject({ open: true, provider: "hoster", productId: `p${r.modelId.slice(1)}` });
      expect(r.inputPricePer1mMicros).toBe(BigInt(Number(r.modelId.slice(1)) * 500_000));
    }
  });

  it("carries each endpoint's cached-input price to its route, absent where its plan sets none", () => {
    const routing = new RoutingTable(undefined, new ModelAliases(), evenSteps(7));
    routing.apply(table([{ cachedInputPricePer1mMicros: 50_000n }, { cachedInputPricePer1mMicros: 0n }]));
    const cached = Object.fromEntries(
      routing.resolveRoutes(CANONICAL, undefined).map((r) => [r.modelId, r.cachedInputPricePer1mMicros]),
    );
    expect(cached).toEqual({ m1: 50_000n, m2: 0n, m4: undefined });
  });

  it("sorts by price, latency or throughput, and reads :floor and :nitro", () => {
    const routing = new RoutingTable(undefined, new ModelAliases(), Math.random);
    routing.apply(table());
    const order = (model: string, provider?: ProviderField) =>
      routing.resolveRoutes(model, undefined, "chat", providerPreferences(provider)).map((r) => r.modelId);
    expect(order(CANONICAL, { sort: "price" })).toEqual(["m1", "m2", "m4"]);
    expect(order(CANONICAL, { sort: "latency" })).toEqual(["m2", "m4", "m1"]);
    expect(order(CANONICAL, { sort: "throughput" })).toEqual(["m4", "m2", "m1"]);
    expect(order(`${CANONICAL}:floor`)).toEqual(["m1", "m2", "m4"]);
    expect(order(`${CANONICAL.toUpperCase()}:nitro`)).toEqual(["m4", "m2", "m1"]);
  });

  it("applies only, ignore, order, max_price, quantizations and allow_fallbacks", () => {
    const routing = new RoutingTable(undefined, new ModelAliases(), Math.random);
    routing.apply(table());
    const order = (provider: ProviderField) =>
      routing.resolveRoutes(CANONICAL, undefined, "chat", providerPreferences(provider)).map((r) => r.modelId);
    expect(order({ only: ["hoster 4"] })).toEqual(["m4"]);
    expect(order({ only: [ids[1]!.toUpperCase()] })).toEqual(["m2"]);
    expect(order({ ignore: ["Hoster 1", "hoster 2"] })).toEqual(["m4"]);
    expect(order({ order: ["Hoster 4", "Hoster 2"], sort: "price" })).toEqual(["m4", "m2", "m1"]);
    expect(order({ order: ["Hoster 4", "Hoster 2"], allow_fallbacks: false })).toEqual(["m4", "m2"]);
    expect(order({ sort: "price", allow_fallbacks: false })).toEqual(["m1"]);
    expect(order({ max_price: { prompt: 0.6, completion: 5 }, sort: "price" })).toEqual(["m1"]);
    expect(order({ quantizations: ["FP8"] })).toEqual(["m2"]);
    expect(() => order({ max_price: { prompt: 0.1 } })).toThrow(AppError);
  });

  it("tries fallbacks (degraded, low uptime) and recently failing endpoints last", () => {
    const now = { t: 0 };
    const outliers = new OutlierTracker({ ejectAfterFailures: 5, backoffMs: 1_000, now: () => now.t });
    const routing = new RoutingTable(outliers, new ModelAliases(), Math.random);
    routing.apply(table([{ tier: "fallback", weight: 0 }]));
    for (let i = 0; i < 20; i++) expect(routing.resolveRoutes(CANONICAL, undefined).at(-1)!.modelId).toBe("m1");
    outliers.failed(`hoster ${ids[1]}`);
    for (let i = 0; i < 20; i++)
      expect(routing.resolveRoutes(CANONICAL, undefined).map((r) => r.modelId)).toEqual(["m4", "m2", "m1"]);
    now.t += 30_000;
    expect(outliers.faultedRecently(`hoster ${ids[1]}`)).toBe(false);
  });

  it("leaves open models to account keys: a scoped key never reaches one", () => {
    const routing = new RoutingTable();
    routing.apply(table());
    const scope = { subscriptionId: "s", productId: "p", hosterId: ids[0]! };
    expect(() => routing.resolveRoutes(CANONICAL, scope)).toThrow(/does not exist|not found|model/i);
  });
});
