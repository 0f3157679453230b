import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRelayHarness, type RelayHarness as Harness } from "./relay-harness.ts";

// How the edge's routing table, fed by registry's WatchCatalog, resolves the platform models of
// registry's configuration (hoster-routing.test.ts covers hosters' models, cloud-catalog.test.ts
// cloud models).

let h: Harness;
beforeAll(async () => {
  h = await startRelayHarness();
});
afterAll(async () => {
  await h?.close();
});

describe("the edge's routing table, for an account key", () => {
  it("resolves an exact model id to a local route with the catalog's prices in micro-USD", async () => {
    expect(await h.route("demo-small")).toEqual({
      modelId: "demo-small",
      provider: "local",
      hosterId: "",
      productId: "",
      inputPricePer1mMicros: 500_000n,
      outputPricePer1mMicros: 1_500_000n,
      contextWindow: 8192n,
      maxOutputTokensCap: 4096n,
      maxN: 1n,
      kind: "chat",
      open: false,
    });
  });

  it("resolves an alias case-insensitively", async () => {
    expect((await h.route("demo SMALL")).modelId).toBe("demo-small");
  });

  it('resolves "auto" to the first catalog model', async () => {
    expect((await h.route("auto")).modelId).toBe("demo-small");
  });

  it("answers model_not_found, naming the model and the param, for an unknown model", () => {
    const err = h.refusal("gpt-9");
    expect(err.code).toBe("model_not_found");
    expect(err.param).toBe("model");
    expect(err.message).toBe("The model `gpt-9` does not exist or you do not have access to it.");
    expect(err.httpStatus).toBe(404);
  });
});

describe("the edge's routing table, for a scoped key", () => {
  it("never gives a scoped (subscription) key a local model, even when its hoster is unknown", () => {
    const scope = { subscriptionId: "sub_1", productId: "prod_1", hosterId: "h_1" };
    for (const model of ["demo-small", "auto"]) {
      expect(h.refusal(model, scope).code, model).toBe("model_not_found");
    }
  });
});
