import { describe, expect, it } from "vitest";
import { MAX_BACKOFF_FACTOR, OutlierTracker } from "../../src/relay/outlier-tracker.ts";

function tracker(ejectAfterFailures = 3, backoffMs = 1_000) {
  let now = 0;
  const outliers = new OutlierTracker({ ejectAfterFailures, backoffMs, now: () => now });
  return { outliers, advance: (ms: number) => (now += ms) };
}

describe("OutlierTracker", () => {
  it("ejects after the configured failures in a row, for the back-off, then takes calls again", () => {
    const { outliers, advance } = tracker(3, 1_000);
    expect(outliers.failed("a")).toBe(false);
    expect(outliers.failed("a")).toBe(false);
    expect(outliers.isEjected("a")).toBe(false);
    expect(outliers.failed("a")).toBe(true);
    expect(outliers.isEjected("a")).toBe(true);
    expect(outliers.isEjected("b")).toBe(false);
    advance(999);
    expect(outliers.isEjected("a")).toBe(true);
    advance(1);
    expect(outliers.isEjected("a")).toBe(false);
  });

  it("starts counting again after a success", () => {
    const { outliers } = tracker(3);
    outliers.failed("a");
    outliers.failed("a");
    outliers.succeeded("a");
    outliers.failed("a");
    outliers.failed("a");
    expect(outliers.isEjected("a")).toBe(false);
  });

  it("ejects a returning upstream at its first failure, with a back-off that doubles up to its cap", () => {
    const { outliers, advance } = tracker(2, 100);
    const backoffs: number[] = [];
    outliers.failed("a");
    outliers.failed("a");
    for (let round = 0; round < 6; round++) {
      let waited = 0;
      for (; outliers.isEjected("a"); waited += 10) advance(10);
      backoffs.push(waited);
      expect(outliers.failed("a")).toBe(true);
    }
    const cap = 100 * MAX_BACKOFF_FACTOR;
    expect(backoffs).toEqual([100, 200, 400, cap, cap, cap]);
  });

  it("ignores failures of calls that were running when it was ejected, and forgets it after a probe", () => {
    const { outliers, advance } = tracker(1, 1_000);
    outliers.failed("a");
    expect(outliers.failed("a")).toBe(false);
    advance(1_000);
    // The late failure did not lengthen the ejection.
    expect(outliers.isEjected("a")).toBe(false);
    outliers.failed("a");
    expect(outliers.isEjected("a")).toBe(true);
    outliers.recovered("a");
    expect(outliers.isEjected("a")).toBe(false);
    // Recovered means a clean record: the next ejection lasts the first back-off, not a doubled one.
    outliers.failed("a");
    advance(1_000);
    expect(outliers.isEjected("a")).toBe(false);
  });
});
