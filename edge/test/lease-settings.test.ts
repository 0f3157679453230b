import { describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { BillingLeaseSettings } from "../src/leases/lease-settings.ts";

const log = createLogger("lease-settings-test", "silent");
const told = (leaseTtlMs: number, edgeIsolationMs: number, maxRequestMs: number) => ({
  leaseTtlMs: BigInt(leaseTtlMs),
  edgeIsolationMs: BigInt(edgeIsolationMs),
  maxRequestMs: BigInt(maxRequestMs),
});

describe("billing's lease settings as an edge runs by them", () => {
  it("paces by billing's default TTL and bounds nothing before billing's first reply", () => {
    const settings = new BillingLeaseSettings({ upstreamTotalTimeoutMs: 600_000, log });
    expect(settings.ttlMs).toBe(2_000);
    expect(settings.isolationMs).toBe(Infinity);
    expect(settings.upstreamTotalMs()).toBe(600_000);
  });

  it("takes each reply's TTL, and the isolation and request bounds only downwards", async () => {
    const settings = new BillingLeaseSettings({ upstreamTotalTimeoutMs: 600_000, log });
    const changes: number[] = [];
    settings.onChange(() => changes.push(settings.isolationMs));
    settings.apply(told(2_000, 60_000, 630_000));
    expect(await settings.first).toEqual({ leaseTtlMs: 2_000, edgeIsolationMs: 60_000, maxRequestMs: 630_000 });
    // A billing restarted with shorter settings: the edge follows at once.
    settings.apply(told(1_000, 10_000, 300_000));
    expect([settings.ttlMs, settings.marginMs, settings.isolationMs, settings.maxRequestMs]).toEqual([
      1_000, 100, 10_000, 300_000,
    ]);
    // Restarted again with longer ones: the TTL follows, the bounds stay (leases granted under the
    // shorter ones may still be in use; billing closes those by the shorter bound).
    settings.apply(told(5_000, 120_000, 630_000));
    expect([settings.ttlMs, settings.isolationMs, settings.maxRequestMs]).toEqual([5_000, 10_000, 300_000]);
    expect(changes).toEqual([60_000, 10_000, 10_000]);
  });

  it("clamps the upstream timeout to MAX_REQUEST_MS − 10 s", () => {
    const settings = new BillingLeaseSettings({ upstreamTotalTimeoutMs: 600_000, log });
    settings.apply(told(2_000, 60_000, 630_000));
    expect(settings.upstreamTotalMs()).toBe(600_000);
    settings.apply(told(2_000, 60_000, 120_000));
    expect(settings.upstreamTotalMs()).toBe(110_000);
  });

  it("reads a reply without settings as billing's defaults", () => {
    const settings = new BillingLeaseSettings({ log });
    settings.apply(undefined);
    expect([settings.ttlMs, settings.isolationMs, settings.maxRequestMs]).toEqual([2_000, 60_000, 630_000]);
  });
});
