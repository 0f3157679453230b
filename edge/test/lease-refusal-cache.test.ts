import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import type { InHand } from "../src/leases/admission-need.ts";
import { isRefusal, RefusalCache } from "../src/leases/refusal-cache.ts";
import { scopeKey } from "../src/leases/scope-key.ts";

const TTL = 2_000;
const stepOne = (credit: bigint): InHand => ({ requests: 1n, credit, tokens: 0n, minCredit: 0n, likelyCredit: 0n });
const stepTwo = (credit: bigint, minCredit = 0n): InHand => ({ ...stepOne(credit), requests: 0n, minCredit });
const noCredit = new AppError("insufficient_credits", "no credit");
const rateLimited = new AppError("rate_limit_exceeded", "slow down");
const account = scopeKey("a");

describe("the edge's cache of billing's refusals", () => {
  it("tells a refusal from any other error", () => {
    expect(isRefusal(noCredit)).toBe(true);
    expect(isRefusal(rateLimited)).toBe(true);
    expect(isRefusal(new AppError("service_unavailable", "down"))).toBe(false);
  });

  it("answers a 402 only for requests needing at least the credit refused, and only for one TTL", () => {
    const cache = new RefusalCache(TTL);
    cache.remember(account, noCredit, 100, stepOne(500n));
    expect(cache.refusing(account, stepOne(500n), 200)).toBe(noCredit);
    expect(cache.refusing(account, stepOne(900n), 200)).toBe(noCredit);
    // A smaller request the balance may still pay asks billing.
    expect(cache.refusing(account, stepOne(499n), 200)).toBeUndefined();
    // A request that may shrink is measured by the least it can be served with.
    expect(cache.refusing(account, stepTwo(900n, 400n), 200)).toBeUndefined();
    expect(cache.refusing(account, stepOne(500n), 100 + TTL)).toBeUndefined();
  });

  it("answers a 429 for step one only: step two's request is counted already", () => {
    const cache = new RefusalCache(TTL);
    cache.remember(account, rateLimited, 0, stepOne(0n));
    expect(cache.refusing(account, stepOne(0n), 1)).toBe(rateLimited);
    expect(cache.refusing(account, stepTwo(10n), 1)).toBeUndefined();
  });

  it("keeps each scope's refusal to that scope", () => {
    const cache = new RefusalCache(TTL);
    cache.remember(scopeKey("a", { keyId: "k" }), noCredit, 0, stepOne(1n));
    expect(cache.refusing(account, stepOne(1n), 1)).toBeUndefined();
    expect(cache.refusing(scopeKey("a", { keyId: "k" }), stepOne(1n), 1)).toBe(noCredit);
  });

  it("lifts refusals older than an answered heartbeat's send", () => {
    const cache = new RefusalCache(TTL);
    cache.remember(account, noCredit, 100, stepOne(1n));
    cache.remember(scopeKey("b"), noCredit, 300, stepOne(1n));
    cache.liftBefore(200);
    expect(cache.size).toBe(1);
    expect(cache.refusing(account, stepOne(1n), 301)).toBeUndefined();
    expect(cache.refusing(scopeKey("b"), stepOne(1n), 301)).toBe(noCredit);
  });

  it("lifts on a recall: the account's every scope, or the one subscription's", () => {
    const cache = new RefusalCache(TTL);
    const sub = scopeKey("a", { subscriptionId: "s" });
    cache.remember(account, noCredit, 0, stepOne(1n));
    cache.remember(sub, rateLimited, 0, stepOne(1n));
    cache.liftOnRecall("a", "s");
    expect(cache.refusing(sub, stepOne(1n), 1)).toBeUndefined();
    expect(cache.refusing(account, stepOne(1n), 1)).toBe(noCredit);
    cache.liftOnRecall("a", "");
    expect(cache.size).toBe(0);
  });
});
