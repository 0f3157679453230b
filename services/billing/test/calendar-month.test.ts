import { describe, expect, it } from "vitest";
import { addCalendarMonth, addCalendarMonths, nextPeriod } from "../src/subscriptions/calendar-month.ts";

const end = (iso: string) => addCalendarMonth(new Date(iso)).toISOString();

describe("a subscription period: start + 1 calendar month, clamped to the month's last day", () => {
  it("keeps the day and the time of day when the next month has it", () => {
    expect(end("2026-03-15T10:20:30.456Z")).toBe("2026-04-15T10:20:30.456Z");
    expect(end("2026-02-28T00:00:00.000Z")).toBe("2026-03-28T00:00:00.000Z");
  });

  it("clamps Jan 31 to Feb 28, or Feb 29 in a leap year", () => {
    expect(end("2026-01-31T23:59:59.999Z")).toBe("2026-02-28T23:59:59.999Z");
    expect(end("2028-01-31T12:00:00.000Z")).toBe("2028-02-29T12:00:00.000Z");
    expect(end("2028-01-29T12:00:00.000Z")).toBe("2028-02-29T12:00:00.000Z");
  });

  it("clamps the 31st to a 30-day month's last day", () => {
    expect(end("2026-03-31T08:00:00.000Z")).toBe("2026-04-30T08:00:00.000Z");
    expect(end("2026-08-31T08:00:00.000Z")).toBe("2026-09-30T08:00:00.000Z");
  });

  it("crosses into the next year in December", () => {
    expect(end("2026-12-31T18:30:00.000Z")).toBe("2027-01-31T18:30:00.000Z");
  });

  it("is computed in UTC whatever the local time zone", () => {
    // 23:30 UTC on Jan 31 is already Feb 1 east of UTC; the period still ends on Feb 28 (UTC).
    expect(end("2026-01-31T23:30:00.000Z")).toBe("2026-02-28T23:30:00.000Z");
  });
});

describe("renewal periods: whole months from the anchor", () => {
  const anchor = new Date("2027-01-31T10:00:00.000Z");
  const next = (periodEnd: string, now: string) => {
    const p = nextPeriod(anchor, new Date(periodEnd), new Date(now));
    return [p.start.toISOString(), p.end.toISOString()];
  };

  it("counts from the anchor, so Jan 31 → Feb 28 → Mar 31 (chaining would drift to Mar 28)", () => {
    expect(addCalendarMonths(anchor, 1).toISOString()).toBe("2027-02-28T10:00:00.000Z");
    expect(addCalendarMonths(anchor, 2).toISOString()).toBe("2027-03-31T10:00:00.000Z");
    expect(addCalendarMonths(anchor, 13).toISOString()).toBe("2028-02-29T10:00:00.000Z");
    expect(next("2027-02-28T10:00:00.000Z", "2027-02-28T10:00:00.000Z")).toEqual([
      "2027-02-28T10:00:00.000Z",
      "2027-03-31T10:00:00.000Z",
    ]);
    expect(next("2027-03-31T10:00:00.000Z", "2027-04-02T00:00:00.000Z")).toEqual([
      "2027-03-31T10:00:00.000Z",
      "2027-04-30T10:00:00.000Z",
    ]);
  });

  it("skips periods missed entirely: the new one holds now", () => {
    expect(next("2027-02-28T10:00:00.000Z", "2027-05-15T00:00:00.000Z")).toEqual([
      "2027-04-30T10:00:00.000Z",
      "2027-05-31T10:00:00.000Z",
    ]);
    // Exactly on a boundary, that boundary starts the period.
    expect(next("2027-02-28T10:00:00.000Z", "2027-05-31T10:00:00.000Z")).toEqual([
      "2027-05-31T10:00:00.000Z",
      "2027-06-30T10:00:00.000Z",
    ]);
    expect(next("2027-02-28T10:00:00.000Z", "2029-12-01T00:00:00.000Z")).toEqual([
      "2029-11-30T10:00:00.000Z",
      "2029-12-31T10:00:00.000Z",
    ]);
  });
});
