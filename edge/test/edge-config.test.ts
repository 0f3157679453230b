import { describe, expect, it } from "vitest";
import { loadEdgeConfig } from "../src/config.ts";
import { defaultEdgeId } from "../src/edge-id.ts";
import { disagreements } from "../src/leases/lease-settings.ts";

const required = { ADMIN_TOKEN: "admin token", TLS_MODE: "off" };

describe("the edge's identity and isolation settings", () => {
  it("defaults EDGE_ID to the host name and port, made a NATS subject token", () => {
    expect(defaultEdgeId(8080, "edge-1.example.internal")).toBe("edge-1-example-internal-8080");
    expect(defaultEdgeId(8080, "host:with spaces*")).toBe("host-with-spaces--8080");
    expect(loadEdgeConfig({ ...required, PORT: "9000" }).EDGE_ID).toMatch(/^[A-Za-z0-9_-]+-9000$/);
    expect(loadEdgeConfig({ ...required, EDGE_ID: "edge-7d9f8c6b5d-x2x7q" }).EDGE_ID).toBe("edge-7d9f8c6b5d-x2x7q");
  });

  it("refuses an EDGE_ID that is not a subject token, naming the variable", () => {
    for (const bad of ["edge.1", "edge 1", "edge>", "e*", "x".repeat(101)]) {
      expect(() => loadEdgeConfig({ ...required, EDGE_ID: bad })).toThrow(/EDGE_ID: must be 1 to 100 letters/);
    }
  });

  it("requires EDGE_ID with PORT 0, whose default would be the same for every such edge", () => {
    expect(() => loadEdgeConfig({ ...required, PORT: "0" })).toThrow(/EDGE_ID: required when PORT is 0/);
    expect(loadEdgeConfig({ ...required, PORT: "0", EDGE_ID: "test-edge" }).EDGE_ID).toBe("test-edge");
  });

  it("has no lease settings of its own: billing's come in its replies", () => {
    const config = loadEdgeConfig(required);
    expect(config.LEASE_TTL_MS).toBeUndefined();
    expect(config.EDGE_ISOLATION_MS).toBeUndefined();
    expect(config.MAX_REQUEST_MS).toBeUndefined();
  });
});

describe("lease settings an edge's environment still sets", () => {
  const billing = { leaseTtlMs: 1_000, edgeIsolationMs: 10_000, maxRequestMs: 630_000 };

  it("disagree with billing's in a line naming both values", () => {
    expect(disagreements({ leaseTtlMs: 2_000, edgeIsolationMs: 10_000 }, billing)).toEqual([
      "LEASE_TTL_MS: this edge's environment sets 2000, billing's is 1000; billing owns it and sends it to the edges: remove it from the edge's environment",
    ]);
    expect(disagreements({ edgeIsolationMs: 60_000, maxRequestMs: 20_000 }, billing)).toHaveLength(2);
  });

  it("agree, or are not set", () => {
    expect(disagreements({ leaseTtlMs: 1_000 }, billing)).toEqual([]);
    expect(disagreements({}, billing)).toEqual([]);
  });
});
