import { describe, expect, it } from "vitest";
import { Route } from "@mkt/proto/registry/v1/registry";
import { RouteCache } from "../src/chat/route-cache.ts";

const scope = { subscriptionId: "s1", productId: "p1", hosterId: "h1" };

/** Caching is on only while the catalog.changed feed is followed. */
const enabled = (cache: RouteCache) => (cache.setEnabled(true), cache);

describe("RouteCache", () => {
  it("reuses a route within its TTL, per model and scope, and asks once for concurrent lookups", async () => {
    const cache = enabled(new RouteCache(60_000));
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
    const cache = enabled(new RouteCache(20));
    await expect(cache.get("m", undefined, () => Promise.reject(new Error("down")))).rejects.toThrow("down");
    expect(await cache.get("m", undefined, async () => undefined)).toBeUndefined();
    const route = Route.fromPartial({ modelId: "m" });
    expect(await cache.get("m", undefined, async () => route)).toBe(route);
    await new Promise((r) => setTimeout(r, 30));
    const fresh = Route.fromPartial({ modelId: "m2" });
    expect(await cache.get("m", undefined, async () => fresh)).toBe(fresh);
  });

  it("asks every time when the TTL is 0", async () => {
    const cache = enabled(new RouteCache(0));
    let lookups = 0;
    for (let i = 0; i < 3; i++) await cache.get("m", undefined, async () => (lookups++, Route.fromPartial({})));
    expect(lookups).toBe(3);
  });

  it("drops one hoster's routes, or all of them, and keeps no lookup that overlapped a drop", async () => {
    const cache = enabled(new RouteCache(60_000));
    let lookups = 0;
    const resolve = (modelId: string) => async () => (lookups++, Route.fromPartial({ modelId }));
    const other = { ...scope, subscriptionId: "s2", hosterId: "h2" };
    await cache.get("m", scope, resolve("a"));
    await cache.get("m", other, resolve("b"));
    await cache.get("m", undefined, resolve("platform"));
    cache.drop("H1"); // ids compare case-insensitively
    await cache.get("m", scope, resolve("a"));
    await cache.get("m", other, resolve("b"));
    await cache.get("m", undefined, resolve("platform"));
    expect(lookups).toBe(4); // only h1's route was asked again
    cache.drop("");
    await cache.get("m", other, resolve("b"));
    await cache.get("m", undefined, resolve("platform"));
    expect(lookups).toBe(6);

    // A lookup in flight when a change arrives may have read the old state: answered, not kept.
    let finish!: (r: Route) => void;
    const slow = cache.get("x", undefined, () => new Promise<Route>((r) => (finish = r)));
    cache.drop("");
    finish(Route.fromPartial({ modelId: "old" }));
    expect((await slow)?.modelId).toBe("old");
    expect((await cache.get("x", undefined, async () => Route.fromPartial({ modelId: "new" })))?.modelId).toBe("new");
  });

  it("caches nothing while disabled, and forgets everything when disabled", async () => {
    const cache = new RouteCache(60_000); // off until the feed is followed
    let lookups = 0;
    const resolve = async () => (lookups++, Route.fromPartial({ modelId: "m" }));
    await cache.get("m", undefined, resolve);
    await cache.get("m", undefined, resolve);
    expect(lookups).toBe(2);
    cache.setEnabled(true);
    await cache.get("m", undefined, resolve);
    await cache.get("m", undefined, resolve);
    expect(lookups).toBe(3);
    cache.setEnabled(false);
    await cache.get("m", undefined, resolve);
    expect(lookups).toBe(4);
    cache.setEnabled(true); // what was cached before the outage is gone
    await cache.get("m", undefined, resolve);
    expect(lookups).toBe(5);
  });
});
