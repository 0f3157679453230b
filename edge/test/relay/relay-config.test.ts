import { describe, expect, it } from "vitest";
import { loadEdgeConfig } from "../../src/config.ts";

const base = { ADMIN_TOKEN: "mk_admin_0123456789abcdef0123456789", TLS_MODE: "off" };

describe("the relay's settings (the edge's configuration)", () => {
  it("defaults to the production bounds, guarded hoster connections and a 5 s durability wait", () => {
    expect(loadEdgeConfig(base)).toMatchObject({
      ALLOW_PRIVATE_UPSTREAMS: false,
      UPSTREAM_CONNECT_TIMEOUT_MS: 5_000,
      UPSTREAM_FIRST_BYTE_TIMEOUT_MS: 30_000,
      UPSTREAM_IDLE_TIMEOUT_MS: 30_000,
      UPSTREAM_TOTAL_TIMEOUT_MS: 600_000,
      UPSTREAM_EJECT_AFTER_FAILURES: 5,
      UPSTREAM_EJECT_BACKOFF_MS: 30_000,
      USAGE_PUBLISH_TIMEOUT_MS: 1_000,
      USAGE_DURABLE_TIMEOUT_MS: 5_000,
    });
  });

  it("rejects a non-positive timeout or ejection bound, naming it", () => {
    for (const name of [
      "UPSTREAM_IDLE_TIMEOUT_MS",
      "USAGE_DURABLE_TIMEOUT_MS",
      "USAGE_PUBLISH_TIMEOUT_MS",
      "UPSTREAM_EJECT_AFTER_FAILURES",
      "UPSTREAM_EJECT_BACKOFF_MS",
    ]) {
      expect(() => loadEdgeConfig({ ...base, [name]: "0" })).toThrow(new RegExp(name));
    }
  });

  it("takes the runaway guard's ratio and slack (1.5 and 32 by default), refusing a ratio below 1", () => {
    expect(loadEdgeConfig(base)).toMatchObject({ OUTPUT_RUNAWAY_RATIO: 1.5, OUTPUT_RUNAWAY_SLACK_TOKENS: 32 });
    expect(loadEdgeConfig({ ...base, OUTPUT_RUNAWAY_RATIO: "2.25", OUTPUT_RUNAWAY_SLACK_TOKENS: "0" })).toMatchObject({
      OUTPUT_RUNAWAY_RATIO: 2.25,
      OUTPUT_RUNAWAY_SLACK_TOKENS: 0,
    });
    for (const bad of ["0.9", "0", "-1", "", "1.5x", "Infinity", "101"]) {
      expect(() => loadEdgeConfig({ ...base, OUTPUT_RUNAWAY_RATIO: bad })).toThrow(/OUTPUT_RUNAWAY_RATIO/);
    }
    for (const bad of ["-1", "1.5", "lots", "1000001"]) {
      expect(() => loadEdgeConfig({ ...base, OUTPUT_RUNAWAY_SLACK_TOKENS: bad })).toThrow(
        /OUTPUT_RUNAWAY_SLACK_TOKENS/,
      );
    }
  });
});
