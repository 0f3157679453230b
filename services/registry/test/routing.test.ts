import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { startHarness, UPSTREAM_TOKEN, type Harness } from "./registry-harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

describe("ResolveRoute", () => {
  it("resolves an exact model id to a local route with the catalog's prices in micro-USD", async () => {
    const { route } = await h.client.resolveRoute({ model: "demo-small" });
    expect(route).toEqual({
      modelId: "demo-small",
      provider: "local",
      hosterId: "",
      productId: "",
      inputPricePer1mMicros: 500_000n,
      outputPricePer1mMicros: 1_500_000n,
      contextWindow: 8192n,
      maxOutputTokensCap: 4096n,
    });
  });

  it("resolves an alias case-insensitively", async () => {
    const { route } = await h.client.resolveRoute({ model: "demo SMALL" });
    expect(route?.modelId).toBe("demo-small");
  });

  it('resolves "auto" to the first catalog model', async () => {
    const { route } = await h.client.resolveRoute({ model: "auto" });
    expect(route?.modelId).toBe("demo-small");
  });

  it("answers model_not_found, naming the model and the param, for an unknown model", async () => {
    const err = await h.client.resolveRoute({ model: "gpt-9" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe("model_not_found");
    expect((err as AppError).param).toBe("model");
    expect((err as AppError).message).toBe("The model `gpt-9` does not exist or you do not have access to it.");
    expect((err as AppError).httpStatus).toBe(404);
  });

  it("never gives a scoped (subscription) key a local model, even when its hoster is unknown", async () => {
    const scope = { subscriptionId: "sub_1", productId: "prod_1", hosterId: "h_1" };
    for (const model of ["demo-small", "auto"]) {
      const err = await h.client.resolveRoute({ model, scope }).catch((e: unknown) => e);
      expect((err as AppError).code).toBe("model_not_found");
    }
  });
});

describe("ListModels", () => {
  it("lists the local catalog as platform-owned models", async () => {
    const { models } = await h.client.listModels({});
    expect(models.map((m) => m.modelId)).toContain("demo-small");
    const demo = models.find((m) => m.modelId === "demo-small")!;
    expect(demo).toMatchObject({
      modelAlias: "Demo Small",
      provider: "local",
      ownedBy: "platform",
      contextWindow: 8192n,
    });
    const now = BigInt(Math.floor(Date.now() / 1000));
    expect(demo.created > now - 3600n && demo.created <= now).toBe(true);
  });

  it("lists no local model for a scoped key (hoster-routing.test.ts covers its hoster's models)", async () => {
    const { models } = await h.client.listModels({ scope: { subscriptionId: "sub_1", productId: "", hosterId: "" } });
    expect(models).toEqual([]);
  });

  it("never logs the upstream token", () => {
    expect(h.logLines.join("\n")).not.toContain(UPSTREAM_TOKEN);
  });
});
