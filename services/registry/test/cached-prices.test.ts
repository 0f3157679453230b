import { describe, expect, it } from "vitest";
import { CatalogTable, OpenEndpoint } from "@mkt/proto/registry/v1/registry";
import { platformTableModels } from "../src/catalog/catalog-table.ts";
import { parseConfiguredModels } from "../src/catalog/configured-models.ts";
import { openCatalog } from "../src/catalog/open-catalog.ts";
import { platformCatalog } from "../src/catalog/platform-catalog.ts";

// A cached-input price from configuration or a plan reaches what the edges route by (the routing
// table) and what ListModels shows; where none is set the model is shown at its input price.

const MODELS = parseConfiguredModels(
  JSON.stringify([
    {
      model_id: "cached",
      context_window: 8192,
      input_price_per_1m_usd: "0.50",
      output_price_per_1m_usd: "1.50",
      cached_input_price_per_1m_usd: "0.05",
    },
    { model_id: "uncached", context_window: 8192, input_price_per_1m_usd: "0.40", output_price_per_1m_usd: "1" },
  ]),
);
const SERVERS = [{ url: "http://127.0.0.1:8090", token: "t" }];

describe("cached-input prices in the catalog", () => {
  it("puts a platform model's cached price in the routing table, absent where none is configured", () => {
    const [cached, uncached] = platformTableModels(
      [{ provider: "local", models: MODELS, servers: SERVERS }],
      new Date(),
    );
    expect(cached!.cachedInputPricePer1mMicros).toBe(50_000n);
    expect(uncached!.cachedInputPricePer1mMicros).toBeUndefined();
  });

  it("lists a platform model with its prices, the cached one at the input price where none is configured", async () => {
    const models = await platformCatalog("local", MODELS, new Date()).models(undefined);
    expect(models.map((m) => m.prices)).toEqual([
      { inputPricePer1mMicros: 500_000n, outputPricePer1mMicros: 1_500_000n, cachedInputPricePer1mMicros: 50_000n },
      { inputPricePer1mMicros: 400_000n, outputPricePer1mMicros: 1_000_000n, cachedInputPricePer1mMicros: 400_000n },
    ]);
  });

  it("lists an open model at its endpoints' lowest cached price, an endpoint without one at its input price", async () => {
    const endpoint = (hosterId: string, input: bigint, cached?: bigint) =>
      OpenEndpoint.fromPartial({
        hosterId,
        inputPricePer1mMicros: input,
        outputPricePer1mMicros: 1_000_000n,
        cachedInputPricePer1mMicros: cached,
      });
    const table = (endpoints: OpenEndpoint[]) =>
      CatalogTable.fromPartial({ openModels: [{ canonicalId: "acme/x", endpoints }] });
    const lowest = async (endpoints: OpenEndpoint[]) =>
      (await openCatalog(async () => table(endpoints)).models(undefined))[0]!.prices;
    // The one with a discount is the cheapest cache hit though the other is the cheapest fresh input.
    expect(await lowest([endpoint("a", 300_000n, 100_000n), endpoint("b", 200_000n)])).toEqual({
      inputPricePer1mMicros: 200_000n,
      outputPricePer1mMicros: 1_000_000n,
      cachedInputPricePer1mMicros: 100_000n,
    });
    // Without a discount anywhere, the lowest input price.
    expect((await lowest([endpoint("a", 300_000n), endpoint("b", 200_000n)]))!.cachedInputPricePer1mMicros).toBe(
      200_000n,
    );
  });
});
