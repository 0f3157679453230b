import { AppError } from "@mkt/runtime/errors";
import type { Em } from "../context.ts";

export const REPORT_INTERVALS = ["hour", "day", "week", "month"] as const;
export type ReportInterval = (typeof REPORT_INTERVALS)[number];

/** The spec's `days` limit: an integer 1..365 (the edge's schema checks it first). */
export function requireDays(days: number): number {
  if (!Number.isInteger(days) || days < 1 || days > 365) {
    throw new AppError("invalid_request", "days must be an integer from 1 to 365.", { param: "days" });
  }
  return days;
}

export function requireInterval(interval: string): ReportInterval {
  const found = REPORT_INTERVALS.find((known) => known === interval);
  if (!found) {
    throw new AppError("invalid_request", `interval must be one of ${REPORT_INTERVALS.join(", ")}.`, {
      param: "interval",
    });
  }
  return found;
}

/** A report's time range, as Postgres timestamptz text: `from` inclusive, `to` exclusive. */
export interface ReportWindow {
  from: string;
  to: string;
}

/**
 * The window of a report (docs/adr/0030-usage-report-windows-and-export.md): whole UTC buckets,
 * from the bucket that holds `now - days` through the current one, so every bucket of a series is
 * complete and the window depends only on the bucket `now` is in. Postgres' date_trunc does the
 * calendar work (weeks start on Monday, months have their own lengths), on UTC wall time whatever
 * the session's zone.
 */
export async function reportWindow(em: Em, now: Date, days: number, interval: ReportInterval): Promise<ReportWindow> {
  const [row] = await em.execute(
    `select (date_trunc(?, utc_now - make_interval(days => ?)) at time zone 'UTC')::text as window_from,
            ((date_trunc(?, utc_now) + ('1 ' || ?)::interval) at time zone 'UTC')::text as window_to
     from (select ?::timestamptz at time zone 'UTC' as utc_now) as clock`,
    [interval, days, interval, interval, now],
  );
  return { from: row!.window_from as string, to: row!.window_to as string };
}
