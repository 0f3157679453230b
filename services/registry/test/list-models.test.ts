import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, UPSTREAM_TOKEN, type Harness } from "./registry-harness.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
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
