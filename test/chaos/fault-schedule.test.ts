import { describe, expect, it } from "vitest";
import { faultSchedule } from "./chaos-soak.ts";

// A chaos soak's faults are drawn from its seed alone, so a printed seed replays them.

const PROCESSES = ["postgres", "nats", "accounts", "registry", "billing", "edge-0", "edge-1", "model", "hoster-server"];

describe("the chaos soak's fault schedule", () => {
  it("is the same for the same seed and another for another seed", () => {
    expect(faultSchedule(42, 120, PROCESSES)).toEqual(faultSchedule(42, 120, PROCESSES));
    expect(faultSchedule(43, 120, PROCESSES)).not.toEqual(faultSchedule(42, 120, PROCESSES));
  });

  it("fills the run with faults of every kind, within their bounds", () => {
    const faults = faultSchedule(7, 600, PROCESSES);
    const total = faults.reduce((sum, f) => sum + f.afterMs + f.forMs, 0);
    expect(total).toBeGreaterThanOrEqual(600_000);
    for (const fault of faults) {
      expect(fault.afterMs).toBeGreaterThanOrEqual(1_000);
      expect(fault.afterMs).toBeLessThanOrEqual(4_000);
      expect(fault.forMs).toBeGreaterThanOrEqual(500);
      expect(fault.forMs).toBeLessThanOrEqual(3_000);
    }
    // Over a long run every process is hit, and both ways.
    expect(new Set(faults.map((f) => f.process))).toEqual(new Set(PROCESSES));
    expect(new Set(faults.map((f) => f.action))).toEqual(new Set(["kill", "pause"]));
  });
});
