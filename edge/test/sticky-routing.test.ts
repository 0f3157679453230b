import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { CatalogTable, OpenEndpoint } from "@mkt/proto/registry/v1/registry";
import { OutlierTracker, RECENT_FAULT_MS } from "../src/relay/outlier-tracker.ts";
import { ModelAliases } from "../src/routing/model-aliases.ts";
import { orderEndpoints, stickyDraw, type EndpointChoice } from "../src/routing/open-routes.ts";
import { NO_PREFERENCES, providerPreferences, type ProviderField } from "../src/routing/provider-preferences.ts";
import { rendezvousUnit } from "../src/routing/rendezvous.ts";
import { RoutingTable } from "../src/routing/routing-table.ts";

const KEYS = 10_000;
/** About five standard deviations of a share over 10,000 keys: a correct rule never misses it. */
const TOLERANCE = 0.022;

/** An endpoint of one open model at `price` USD per 1M tokens (input and output together), weighted as registry weighs it. */
function choice(name: string, price: number, extra: Partial<OpenEndpoint> & { recentFault?: boolean } = {}) {
  const { recentFault = false, ...fields } = extra;
  const endpoint = OpenEndpoint.fromPartial({
    hosterId: `hoster-${name}`,
    modelId: name,
    productId: `plan-${name}`,
    inputPricePer1mMicros: BigInt(price * 500_000),
    outputPricePer1mMicros: BigInt(price * 500_000),
    tier: "primary",
    weight: price === 0 ? 0 : 1 / price ** 2,
    ...fields,
  });
  return { endpoint, hosterName: name, recentFault } satisfies EndpointChoice;
}

const sticky = (choices: EndpointChoice[], key: string, provider?: ProviderField) =>
  orderEndpoints(choices, provider === undefined ? NO_PREFERENCES : providerPreferences(provider), stickyDraw(key)).map(
    (e) => e.modelId,
  );

/** How often each order (names joined by ">") comes out over KEYS random keys, as shares. */
function orderShares(choices: EndpointChoice[]) {
  const counts = new Map<string, number>();
  for (let i = 0; i < KEYS; i++) {
    const order = sticky(choices, randomUUID()).join(">");
    counts.set(order, (counts.get(order) ?? 0) + 1);
  }
  return {
    of: (order: string) => (counts.get(order) ?? 0) / KEYS,
    first: (name: string) =>
      [...counts].filter(([order]) => order.startsWith(`${name}>`)).reduce((sum, [, n]) => sum + n, 0) / KEYS,
  };
}

const PRICED = [choice("one", 1), choice("two", 2), choice("four", 4)];

describe("a conversation's endpoint order by weighted rendezvous hashing", () => {
  it("puts each endpoint first with probability w / Σw over 10,000 keys: 16/21, 4/21, 1/21", () => {
    const { first } = orderShares(PRICED);
    expect(Math.abs(first("one") - 16 / 21)).toBeLessThan(TOLERANCE);
    expect(Math.abs(first("two") - 4 / 21)).toBeLessThan(TOLERANCE);
    expect(Math.abs(first("four") - 1 / 21)).toBeLessThan(TOLERANCE);
  });

  it("orders the rest as weighted draws without replacement would, so failover spreads by price too", () => {
    const share = orderShares(PRICED).of;
    // P(one, two, four) = 16/21 × 4/5; P(two, one, four) = 4/21 × 16/17; P(four, two, one) = 1/21 × 4/20.
    expect(Math.abs(share("one>two>four") - (16 / 21) * (4 / 5))).toBeLessThan(TOLERANCE);
    expect(Math.abs(share("one>four>two") - (16 / 21) * (1 / 5))).toBeLessThan(TOLERANCE);
    expect(Math.abs(share("two>one>four") - (4 / 21) * (16 / 17))).toBeLessThan(TOLERANCE);
    expect(Math.abs(share("four>two>one") - (1 / 21) * (4 / 20))).toBeLessThan(TOLERANCE);
  });

  it("gives one key the same order every time, on any edge (no state), and another key its own", () => {
    const orders = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const key = `conversation-${i}`;
      const order = sticky(PRICED, key);
      expect(sticky([...PRICED].reverse(), key)).toEqual(order);
      orders.add(order.join(">"));
    }
    // Two hundred keys reach more than one order (the first alone differs for a fifth of them).
    expect(orders.size).toBeGreaterThan(2);
  });

  it("keeps a key's order of the others when an endpoint comes or goes (the rendezvous property)", () => {
    const five = [...PRICED, choice("three", 3), choice("five", 5)];
    for (let i = 0; i < 1_000; i++) {
      const key = randomUUID();
      const whole = sticky(five, key);
      for (const gone of five) {
        const without = sticky(
          five.filter((c) => c !== gone),
          key,
        );
        expect(without).toEqual(whole.filter((name) => name !== gone.endpoint.modelId));
      }
    }
  });

  it("keeps the tiers: free first (each equally likely first), then priced, then recently faulted, then fallbacks", () => {
    const choices = [
      choice("free-a", 0),
      choice("free-b", 0),
      ...PRICED,
      choice("faulted", 1, { recentFault: true }),
      choice("degraded", 1, { tier: "fallback", weight: 0 }),
    ];
    let freeAFirst = 0;
    let oneFirstOfPriced = 0;
    for (let i = 0; i < KEYS; i++) {
      const order = sticky(choices, randomUUID());
      expect(new Set(order.slice(0, 2))).toEqual(new Set(["free-a", "free-b"]));
      expect(new Set(order.slice(2, 5))).toEqual(new Set(["one", "two", "four"]));
      expect(order.slice(5)).toEqual(["faulted", "degraded"]);
      if (order[0] === "free-a") freeAFirst++;
      if (order[2] === "one") oneFirstOfPriced++;
    }
    expect(Math.abs(freeAFirst / KEYS - 1 / 2)).toBeLessThan(TOLERANCE);
    expect(Math.abs(oneFirstOfPriced / KEYS - 16 / 21)).toBeLessThan(TOLERANCE);
  });

  it("filters by the request's preferences first; `sort` and `order` override the conversation's order", () => {
    for (let i = 0; i < 100; i++) {
      const key = randomUUID();
      expect(sticky(PRICED, key, { ignore: ["one"] })).toEqual(sticky(PRICED, key).filter((n) => n !== "one"));
      expect(sticky(PRICED, key, { only: ["four"] })).toEqual(["four"]);
      expect(sticky(PRICED, key, { sort: "price" })).toEqual(["one", "two", "four"]);
      expect(sticky(PRICED, key, { order: ["four"] })[0]).toBe("four");
    }
  });

  it("hashes every (key, endpoint) strictly inside (0, 1), so −w / ln(h) is always finite and positive", () => {
    for (let i = 0; i < KEYS; i++) {
      const h = rendezvousUnit(randomUUID(), `endpoint-${i % 7}`);
      expect(h).toBeGreaterThan(0);
      expect(h).toBeLessThan(1);
    }
  });
});

describe("a conversation's failover in the routing table", () => {
  const CANONICAL = "acme/shared-8b";
  const table = CatalogTable.fromPartial({
    hosters: PRICED.map(({ endpoint }) => ({
      hosterId: endpoint.hosterId,
      name: endpoint.modelId,
      status: "healthy",
      models: [{ modelId: endpoint.modelId, contextWindow: 8192n, canonicalId: CANONICAL }],
      endpointUrl: `https://${endpoint.modelId}.example`,
      token: "t",
      upstreamKey: `upstream ${endpoint.modelId}`,
    })),
    openModels: [{ canonicalId: CANONICAL, endpoints: PRICED.map((c) => c.endpoint) }],
  });

  it("walks the conversation's order while its first endpoint is out of its tier, and returns once it is back", () => {
    const now = { t: 0 };
    const outliers = new OutlierTracker({ ejectAfterFailures: 5, backoffMs: 1_000, now: () => now.t });
    // A random source that fails the test if drawn from: a conversation is never drawn at random.
    const routing = new RoutingTable(outliers, new ModelAliases(), () => {
      throw new Error("a sticky request drew at random");
    });
    routing.apply(table);
    const key = "conversation";
    const order = () =>
      routing.resolveRoutes(CANONICAL, undefined, "chat", NO_PREFERENCES, () => key).map((r) => r.modelId);
    const [first, second, third] = order() as [string, string, string];
    outliers.failed(`upstream ${first}`);
    expect(order()).toEqual([second, third, first]);
    now.t += RECENT_FAULT_MS - 1;
    expect(order()).toEqual([second, third, first]);
    now.t += 1;
    expect(order()).toEqual([first, second, third]);
  });
});
