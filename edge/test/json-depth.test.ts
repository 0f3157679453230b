import { describe, expect, it } from "vitest";
import { nestedDeeperThan } from "../src/plugins/json-depth.ts";

const nested = (depth: number): unknown => JSON.parse("[".repeat(depth) + "]".repeat(depth));

describe("nestedDeeperThan", () => {
  it("counts arrays and objects as levels; scalars add none", () => {
    expect(nestedDeeperThan("text", 0)).toBe(false);
    expect(nestedDeeperThan({ a: [1, { b: "x" }] }, 3)).toBe(false);
    expect(nestedDeeperThan({ a: [1, { b: "x" }] }, 2)).toBe(true);
    expect(nestedDeeperThan(nested(100), 100)).toBe(false);
    expect(nestedDeeperThan(nested(101), 100)).toBe(true);
  });

  it("walks 500,000 levels without overflowing the stack", () => {
    expect(nestedDeeperThan(nested(500_000), 100)).toBe(true);
  });
});
