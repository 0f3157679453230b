import { describe, expect, it } from "vitest";
import { loadBillingConfig } from "../src/config.ts";

const required = { SECRETS_KEY: "ab".repeat(32), TLS_MODE: "off" };

describe("billing's lease settings", () => {
  it("refuses an EDGE_ISOLATION_MS not above LEASE_TTL_MS, naming both", () => {
    expect(loadBillingConfig(required).EDGE_ISOLATION_MS).toBe(60_000);
    expect(() => loadBillingConfig({ ...required, LEASE_TTL_MS: "2000", EDGE_ISOLATION_MS: "2000" })).toThrow(
      /EDGE_ISOLATION_MS: must be more than LEASE_TTL_MS \(2000 ≤ 2000\)/,
    );
  });

  it("refuses a MAX_REQUEST_MS that leaves an upstream call less than a second past the admission margin", () => {
    expect(() => loadBillingConfig({ ...required, MAX_REQUEST_MS: "10999" })).toThrow(/MAX_REQUEST_MS/);
    expect(loadBillingConfig({ ...required, MAX_REQUEST_MS: "11000" }).MAX_REQUEST_MS).toBe(11_000);
  });
});
