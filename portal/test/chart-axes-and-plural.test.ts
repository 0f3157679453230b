import { describe, expect, it } from "vitest";
import { axisWidth, barRange, WHOLE_INCREMENTS } from "../src/lib/chart-axes.ts";
import { plural } from "../src/lib/format.ts";

describe("axisWidth", () => {
  const sevenPerCharacter = (text: string) => text.length * 7;

  it("makes room for the widest label, so none is clipped", () => {
    expect(axisWidth(["$0.00", "$0.00004"], sevenPerCharacter)).toBe(8 * 7 + 18);
    expect(axisWidth(["$0.00004", "$0.00"], sevenPerCharacter)).toBe(axisWidth(["$0.00004"], sevenPerCharacter));
  });

  it("rounds up to whole pixels and leaves the ticks their room when there is no label", () => {
    expect(axisWidth(["1"], () => 6.2)).toBe(25);
    expect(axisWidth([], sevenPerCharacter)).toBe(18);
  });
});

describe("WHOLE_INCREMENTS", () => {
  it("steps a count axis by whole numbers only, from 1 up", () => {
    expect(WHOLE_INCREMENTS.slice(0, 6)).toEqual([1, 2, 5, 10, 20, 50]);
    expect(WHOLE_INCREMENTS.every(Number.isInteger)).toBe(true);
    expect(WHOLE_INCREMENTS.at(-1)).toBeGreaterThanOrEqual(1e15);
  });
});

describe("barRange", () => {
  it("reaches half a bucket beyond the first and last bars", () => {
    expect(barRange([0, 3600, 7200], 86_400)).toEqual([-1800, 9000]);
  });

  it("uses the given step when there is a single bar", () => {
    expect(barRange([86_400], 86_400)).toEqual([43_200, 129_600]);
  });
});

describe("plural", () => {
  it("says one subscriber, and any other number of subscribers", () => {
    expect(plural(1, "subscriber")).toBe("1 subscriber");
    expect(plural(0, "subscriber")).toBe("0 subscribers");
    expect(plural(1200, "subscriber")).toBe("1,200 subscribers");
  });
});
