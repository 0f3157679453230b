import { describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { EdgeIncarnation, isSuperseded, supersededError } from "../src/leases/edge-incarnation.ts";

describe("an edge process's incarnation", () => {
  it("calls as 0 until billing's first answer gives it a number, which then stays", () => {
    const self = new EdgeIncarnation("edge-a");
    expect(self.caller()).toEqual({ edgeId: "edge-a", incarnation: 0n, bootId: self.bootId });
    self.answered(4n);
    self.answered(5n);
    expect(self.number).toBe(4n);
    expect(self.caller().incarnation).toBe(4n);
  });

  it("draws a boot id of its own per process", () => {
    expect(new EdgeIncarnation("edge-a").bootId).not.toBe(new EdgeIncarnation("edge-a").bootId);
  });

  it("is superseded once and for good", () => {
    const self = new EdgeIncarnation("edge-a");
    expect(self.superseded).toBe(false);
    expect(self.supersede()).toBe(true);
    expect(self.supersede()).toBe(false);
    expect(self.superseded).toBe(true);
  });

  it("answers a superseded edge's clients 503, never 402/429", () => {
    expect(isSuperseded(new AppError("edge_superseded", "replaced"))).toBe(true);
    expect(isSuperseded(new AppError("service_unavailable", "down"))).toBe(false);
    expect(supersededError().httpStatus).toBe(503);
  });
});
