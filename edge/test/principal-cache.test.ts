import { describe, expect, it } from "vitest";
import { Principal } from "@mkt/proto/accounts/v1/accounts";
import { PrincipalCache } from "../src/principal-cache.ts";

const TTL = 1_000; // margin: 100 ms
const principal = (keyId: string, tier = "free") =>
  Principal.fromPartial({ accountId: "a1", keyId, email: "a@example.com", tier });

/** An authenticate() that counts its calls and can be held open. */
function lookups(keyId: string) {
  let calls = 0;
  const waiting: Array<() => void> = [];
  let held = false;
  return {
    get calls() {
      return calls;
    },
    hold() {
      held = true;
    },
    release: () => waiting.splice(0).forEach((resolve) => resolve()),
    authenticate: () => {
      calls++;
      if (!held) return Promise.resolve(principal(keyId));
      return new Promise<Principal>((resolve) => waiting.push(() => resolve(principal(keyId))));
    },
  };
}

/** A cache on a clock the test moves, with its revocation feed up. */
function cacheAt(start = 0) {
  const clock = { now: start };
  const cache = new PrincipalCache({ ttlMs: TTL, now: () => clock.now });
  cache.setEnabled(true);
  return { cache, clock };
}

describe("principal cache", () => {
  it("answers repeated lookups from memory while the revocation feed is up", async () => {
    const { cache } = cacheAt();
    const k = lookups("k1");
    await cache.get("mk_secret", k.authenticate);
    await cache.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(1);
  });

  it("re-checks a key once it is revoked", async () => {
    const { cache } = cacheAt();
    const k = lookups("k1");
    await cache.get("mk_secret", k.authenticate);
    cache.revoke("k1");
    await cache.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(2);
  });

  it("does not keep an answer whose lookup overlapped a revocation", async () => {
    const { cache } = cacheAt();
    const k = lookups("k1");
    k.hold();
    const first = cache.get("mk_secret", k.authenticate);
    cache.revoke("k1");
    k.release();
    await first;
    expect(cache.size).toBe(0);

    // Nor does a request after a revocation join a lookup that started before it.
    const before = cache.get("mk_secret", k.authenticate);
    cache.revoke("k1");
    const after = cache.get("mk_secret", k.authenticate);
    k.release();
    await Promise.all([before, after]);
    expect(k.calls).toBe(3);
  });

  it("shares one lookup between concurrent requests with the same key", async () => {
    const { cache } = cacheAt();
    const k = lookups("k1");
    await Promise.all([1, 2, 3].map(() => cache.get("mk_secret", k.authenticate)));
    expect(k.calls).toBe(1);
  });

  it("propagates a failed lookup and keeps nothing", async () => {
    const { cache } = cacheAt();
    await expect(cache.get("mk_bad", () => Promise.reject(new Error("Invalid API key.")))).rejects.toThrow(
      "Invalid API key.",
    );
    expect(cache.size).toBe(0);
  });

  it("uses a principal until its lookup's send time + TTL − margin, then asks again", async () => {
    const { cache, clock } = cacheAt(5_000);
    const k = lookups("k1");
    await cache.get("mk_secret", k.authenticate);
    clock.now = 5_000 + TTL - 101;
    await cache.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(1);
    clock.now = 5_000 + TTL - 100;
    await cache.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(2);
  });

  it("extends principals in use from a revalidation's send time, drops the keys it leaves out", async () => {
    const { cache, clock } = cacheAt();
    const [k1, k2] = [lookups("k1"), lookups("k2")];
    await cache.get("mk_one", k1.authenticate);
    await cache.get("mk_two", k2.authenticate);

    clock.now = 500;
    const asked: string[][] = [];
    await cache.revalidate(async (keyIds) => {
      asked.push(keyIds);
      clock.now = 700; // the reply comes later than the call went: validity counts from the send
      return [principal("k1", "pro")];
    });
    expect(asked).toEqual([["k1", "k2"]]);
    expect(cache.size).toBe(1);

    clock.now = 500 + TTL - 101;
    expect(await cache.get("mk_one", k1.authenticate)).toMatchObject({ keyId: "k1", tier: "pro" });
    expect(k1.calls).toBe(1);
    clock.now = 500 + TTL - 100;
    await cache.get("mk_one", k1.authenticate);
    expect(k1.calls).toBe(2);
    await cache.get("mk_two", k2.authenticate); // left out: asked again
    expect(k2.calls).toBe(2);
  });

  it("drops an entry unused for two TTLs instead of revalidating it", async () => {
    const { cache, clock } = cacheAt();
    const [used, unused] = [lookups("used"), lookups("unused")];
    await cache.get("mk_used", used.authenticate);
    await cache.get("mk_unused", unused.authenticate);
    const asked: string[][] = [];
    const check = async (keyIds: string[]) => (asked.push(keyIds), keyIds.map((id) => principal(id)));
    for (let t = 500; t <= 2_500; t += 500) {
      clock.now = t;
      await cache.get("mk_used", used.authenticate);
      await cache.revalidate(check);
    }
    expect(asked.at(0)).toEqual(["used", "unused"]);
    expect(asked.at(-1)).toEqual(["used"]);
    expect(cache.size).toBe(1);
    expect(used.calls).toBe(1); // revalidation kept the key in use going, with no new lookup
  });

  it("leaves alone what a failed revalidation was about, and never revives an entry revoked meanwhile", async () => {
    const { cache, clock } = cacheAt();
    const k = lookups("k1");
    await cache.get("mk_secret", k.authenticate);
    await expect(cache.revalidate(() => Promise.reject(new Error("accounts down")))).rejects.toThrow("accounts down");
    expect(cache.size).toBe(1);

    clock.now = 500;
    await cache.revalidate(async (keyIds) => {
      cache.revoke("k1"); // keys.revoked arrives while the answer (from before the revocation) is on its way
      return keyIds.map((id) => principal(id));
    });
    expect(cache.size).toBe(0);
  });

  it("serves nothing from memory until the revocation feed is followed, and one TTL at most once it is down", async () => {
    const never = new PrincipalCache({ ttlMs: TTL, now: () => 0 });
    const k = lookups("k1");
    await never.get("mk_secret", k.authenticate);
    await never.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(2);

    // Down at 400: memory still answers until 1,400, however recently the principal was
    // revalidated, since a revocation sent meanwhile is lost.
    const { cache, clock } = cacheAt();
    const live = async (keyIds: string[]) => keyIds.map((id) => principal(id));
    const k2 = lookups("k2");
    await cache.get("mk_other", k2.authenticate);
    clock.now = 400;
    cache.setEnabled(false);
    for (const t of [500, 1_000]) {
      clock.now = t;
      await cache.revalidate(live);
    }
    clock.now = 1_399;
    await cache.get("mk_other", k2.authenticate);
    expect(k2.calls).toBe(1);
    clock.now = 1_400;
    await cache.get("mk_other", k2.authenticate);
    await cache.get("mk_other", k2.authenticate);
    expect(k2.calls).toBe(3);

    // Back up: it starts empty (revocations were lost), then caches again.
    cache.setEnabled(true);
    expect(cache.size).toBe(0);
    await cache.get("mk_other", k2.authenticate);
    await cache.get("mk_other", k2.authenticate);
    expect(k2.calls).toBe(4);
  });
});
