import { describe, expect, it } from "vitest";
import { growthFor, leaseTarget } from "../src/leases/lease-sizing.ts";

const base = { edges: 1, demandPerSecond: 0n, inHand: 0n, ttlMs: 2_000 };

describe("lease sizing", () => {
  it("grants two TTLs of demand when the account has plenty", () => {
    // 3 requests/s × 2 × 2 s = 12.
    expect(leaseTarget({ ...base, left: 1_000n, demandPerSecond: 3n })).toBe(12n);
  });

  it("splits what is left evenly between the edges using the account", () => {
    // rpm 10 on two edges: at most 5 each, whatever the demand.
    expect(leaseTarget({ ...base, left: 10n, edges: 2, demandPerSecond: 100n })).toBe(5n);
  });

  it("falls back to one request at a time once left < n", () => {
    expect(leaseTarget({ ...base, left: 1n, edges: 2, demandPerSecond: 100n, inHand: 1n })).toBe(1n);
    expect(leaseTarget({ ...base, left: 3n, edges: 4, demandPerSecond: 100n, inHand: 1n })).toBe(1n);
  });

  it("always covers the request in hand when the account can", () => {
    // A 0.01 USD balance and a request whose worst case is 0.004 USD, on three edges.
    expect(leaseTarget({ ...base, left: 10_000n, edges: 3, inHand: 4_000n })).toBe(4_000n);
  });

  it("never grants more than is left, even for a request in hand", () => {
    expect(leaseTarget({ ...base, left: 3_000n, inHand: 4_000n })).toBe(3_000n);
    expect(leaseTarget({ ...base, left: 0n, inHand: 1n })).toBe(0n);
    expect(leaseTarget({ ...base, left: -5n, inHand: 1n })).toBe(0n);
  });

  it("rounds a small demand up to one unit", () => {
    expect(leaseTarget({ ...base, left: 100n, demandPerSecond: 1n, ttlMs: 200 })).toBe(1n);
  });

  it("grows a lease only by what it lacks", () => {
    // Target 12 with 5 unspent: add 7; with 20 unspent: add nothing.
    expect(growthFor({ ...base, left: 1_000n, demandPerSecond: 3n }, 5n)).toBe(7n);
    expect(growthFor({ ...base, left: 1_000n, demandPerSecond: 3n }, 20n)).toBe(0n);
    // What is left excludes the lease's own unspent room, which still counts in the share.
    expect(growthFor({ ...base, left: 6n, edges: 2, demandPerSecond: 100n }, 4n)).toBe(1n);
  });
});
