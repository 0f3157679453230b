import { describe, expect, it } from "vitest";
import { keyWindow, neverResets } from "../src/key-limits/key-windows.ts";

const at = (iso: string) => new Date(iso);

describe("key limit windows (UTC)", () => {
  it("are the day, the week from Monday, the calendar month, or all time", () => {
    // 2030-01-09 is a Wednesday.
    const now = at("2030-01-09T15:30:00Z");
    expect(keyWindow("daily", now)).toEqual({ start: at("2030-01-09T00:00:00Z"), end: at("2030-01-10T00:00:00Z") });
    expect(keyWindow("weekly", now)).toEqual({ start: at("2030-01-07T00:00:00Z"), end: at("2030-01-14T00:00:00Z") });
    expect(keyWindow("monthly", now)).toEqual({ start: at("2030-01-01T00:00:00Z"), end: at("2030-02-01T00:00:00Z") });
    expect(neverResets(keyWindow(null, now))).toBe(true);
    expect(keyWindow(null, now).start).toEqual(new Date(0));
  });

  it("put a Sunday in the week that began the Monday before, and December's month ends with the year", () => {
    const sunday = at("2030-01-13T23:59:59Z");
    expect(keyWindow("weekly", sunday).start).toEqual(at("2030-01-07T00:00:00Z"));
    expect(keyWindow("weekly", at("2030-01-14T00:00:00Z")).start).toEqual(at("2030-01-14T00:00:00Z"));
    expect(keyWindow("monthly", at("2030-12-31T23:00:00Z")).end).toEqual(at("2031-01-01T00:00:00Z"));
  });
});
