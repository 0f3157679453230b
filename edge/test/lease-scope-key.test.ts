import { describe, expect, it } from "vitest";
import { recallConcerns, sameScope, ScopeMap, scopeKey } from "../src/leases/scope-key.ts";

describe("a lease scope key", () => {
  it("tells apart the account's own allowance, a subscription's, an open plan's and a key's", () => {
    const keys = [
      scopeKey("a"),
      scopeKey("a", { subscriptionId: "s" }),
      scopeKey("a", { openProductId: "p" }),
      scopeKey("a", { keyId: "k" }),
      scopeKey("b"),
    ];
    for (const [i, a] of keys.entries()) {
      for (const [j, b] of keys.entries()) expect(sameScope(a, b)).toBe(i === j);
    }
    // A subscription's request is admitted on its budget, never on an open plan.
    expect(scopeKey("a", { subscriptionId: "s", openProductId: "p" })).toEqual(scopeKey("a", { subscriptionId: "s" }));
  });

  it("keeps ids that a string key would have confused apart", () => {
    // With `${account}/${scope}/${key}` strings these were one key, and a prefix search by
    // account "a" also found account "a/x".
    expect(sameScope(scopeKey("a", { subscriptionId: "open:p" }), scopeKey("a", { openProductId: "p" }))).toBe(false);
    expect(recallConcerns(scopeKey("a/x"), "a", "")).toBe(false);
  });

  it("is concerned by a recall of its account's lease, or of its own subscription's budget", () => {
    const own = scopeKey("a", { keyId: "k" });
    const sub = scopeKey("a", { subscriptionId: "s" });
    expect(recallConcerns(own, "a", "")).toBe(true);
    expect(recallConcerns(sub, "a", "")).toBe(true);
    expect(recallConcerns(own, "a", "s")).toBe(false);
    expect(recallConcerns(sub, "a", "s")).toBe(true);
    expect(recallConcerns(sub, "a", "t")).toBe(false);
    expect(recallConcerns(sub, "b", "")).toBe(false);
  });
});

describe("values by scope", () => {
  it("finds, replaces and deletes by equal keys, and answers for an account as a whole", () => {
    const map = new ScopeMap<number>();
    map.set(scopeKey("a"), 1);
    map.set(scopeKey("a", { keyId: "k" }), 2);
    map.set(scopeKey("a"), 3);
    expect(map.get(scopeKey("a"))).toBe(3);
    expect(map.size).toBe(2);
    expect(map.hasAccount("a")).toBe(true);
    expect(map.hasAccount("b")).toBe(false);

    map.delete(scopeKey("a"), 1);
    expect(map.get(scopeKey("a"))).toBe(3);
    map.delete(scopeKey("a"), 3);
    expect(map.get(scopeKey("a"))).toBeUndefined();
    map.delete(scopeKey("a", { keyId: "k" }));
    expect(map.hasAccount("a")).toBe(false);
    expect(map.size).toBe(0);
  });

  it("deletes what a predicate names, across accounts", () => {
    const map = new ScopeMap<number>();
    map.set(scopeKey("a"), 1);
    map.set(scopeKey("a", { subscriptionId: "s" }), 2);
    map.set(scopeKey("b"), 3);
    map.deleteWhere((key) => recallConcerns(key, "a", "s"));
    expect(map.get(scopeKey("a"))).toBe(1);
    expect(map.get(scopeKey("a", { subscriptionId: "s" }))).toBeUndefined();
    map.deleteWhere((_, value) => value < 3);
    expect(map.hasAccount("a")).toBe(false);
    expect(map.get(scopeKey("b"))).toBe(3);
  });
});
