import { describe, expect, it } from "vitest";
import { Principal } from "@mkt/proto/accounts/v1/accounts";
import { PrincipalCache } from "../src/principal-cache.ts";

const principal = (keyId: string) => Principal.fromPartial({ accountId: "a1", keyId, email: "a@example.com" });

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

describe("principal cache", () => {
  it("answers repeated lookups from memory while the revocation feed is up", async () => {
    const cache = new PrincipalCache(60_000);
    cache.setEnabled(true);
    const k = lookups("k1");
    await cache.get("mk_secret", k.authenticate);
    await cache.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(1);
  });

  it("re-checks a key once it is revoked", async () => {
    const cache = new PrincipalCache(60_000);
    cache.setEnabled(true);
    const k = lookups("k1");
    await cache.get("mk_secret", k.authenticate);
    cache.revoke("k1");
    await cache.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(2);
  });

  it("does not keep an answer whose lookup overlapped a revocation", async () => {
    const cache = new PrincipalCache(60_000);
    cache.setEnabled(true);
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
    const cache = new PrincipalCache(60_000);
    cache.setEnabled(true);
    const k = lookups("k1");
    await Promise.all([1, 2, 3].map(() => cache.get("mk_secret", k.authenticate)));
    expect(k.calls).toBe(1);
  });

  it("caches nothing while the revocation feed is down, and expires entries after the TTL", async () => {
    const off = new PrincipalCache(60_000);
    const k = lookups("k1");
    await off.get("mk_secret", k.authenticate);
    await off.get("mk_secret", k.authenticate);
    expect(k.calls).toBe(2);

    const short = new PrincipalCache(1);
    short.setEnabled(true);
    const k2 = lookups("k2");
    await short.get("mk_other", k2.authenticate);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await short.get("mk_other", k2.authenticate);
    expect(k2.calls).toBe(2);
  });

  it("propagates a failed lookup and keeps nothing", async () => {
    const cache = new PrincipalCache(60_000);
    cache.setEnabled(true);
    await expect(cache.get("mk_bad", () => Promise.reject(new Error("Invalid API key.")))).rejects.toThrow(
      "Invalid API key.",
    );
    expect(cache.size).toBe(0);
  });
});
