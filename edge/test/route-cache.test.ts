import { describe, expect, it } from "vitest";
import { Route } from "@mkt/proto/registry/v1/registry";
import { RouteCache } from "../src/chat/route-cache.ts";

const scope = { subscriptionId: "s1", productId: "p1", hosterId: "h1" };

describe("RouteCache", () => {
  it("reuses a route within its TTL, per model and scope, and asks once for concurrent lookups", async () => {
    const cache = new RouteCache(60_000);
    let lookups = 0;
    const resolve = (modelId: string) => async () => {
      lookups++;
      await new Promise((r) => setTimeout(r, 5));
      return Route.fromPartial({ modelId });
    };
    const [a, b] = await Promise.all([
      cache.get("m", undefined, resolve("m")),
      cache.get("m", undefined, resolve("m")),
    ]);
    expect(a).toBe(b);
    expect(lookups).toBe(1);
    expect(await cache.get("m", undefined, resolve("m"))).toBe(a);
    expect(lookups).toBe(1);
    // A scoped key's routes are its own.
    expect((await cache.get("m", scope, resolve("scoped")))?.modelId).toBe("scoped");
    expect(lookups).toBe(2);
  });

  it("does not keep failures or misses, and expires entries", async () => {
    const cache = new RouteCache(20);
    await expect(cache.get("m", undefined, () => Promise.reject(new Error("down")))).rejects.toThrow("down");
    expect(await cache.get("m", undefined, async () => undefined)).toBeUndefined();
    const route = Route.fromPartial({ modelId: "m" });
    expect(await cache.get("m", undefined, async () => route)).toBe(route);
    await new Promise((r) => setTimeout(r, 30));
    const fresh = Route.fromPartial({ modelId: "m2" });
    expect(await cache.get("m", undefined, async () => fresh)).toBe(fresh);
  });

  it("asks every time when the TTL is 0", async () => {
    const cache = new RouteCache(0);
    let lookups = 0;
    for (let i = 0; i < 3; i++) await cache.get("m", undefined, async () => (lookups++, Route.fromPartial({})));
    expect(lookups).toBe(3);
  });
});
