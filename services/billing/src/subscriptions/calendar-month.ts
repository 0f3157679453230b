/**
 * The end of a period that starts at `start`
 * (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md): the same day and time of day one
 * calendar month later, in UTC, clamped to the last day of that month (Jan 31 → Feb 28 or 29).
 */
export function addCalendarMonth(start: Date): Date {
  return addCalendarMonths(start, 1);
}

/**
 * `anchor` plus `months` calendar months in UTC, on the anchor's day and time of day, clamped to
 * the last day of the target month. Always counted from the anchor, never chained, so a Jan 31
 * anchor gives Feb 28, then Mar 31 (chaining would drift to Mar 28).
 */
export function addCalendarMonths(anchor: Date, months: number): Date {
  const year = anchor.getUTCFullYear();
  const month = anchor.getUTCMonth() + months; // Date.UTC carries months past 11 into later years
  const lastDay = new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
  return new Date(
    Date.UTC(
      year,
      month,
      Math.min(anchor.getUTCDate(), lastDay),
      anchor.getUTCHours(),
      anchor.getUTCMinutes(),
      anchor.getUTCSeconds(),
      anchor.getUTCMilliseconds(),
    ),
  );
}

/** Whole calendar months from `from`'s month to `to`'s (UTC), ignoring days. */
function monthsBetween(from: Date, to: Date): number {
  return (to.getUTCFullYear() - from.getUTCFullYear()) * 12 + (to.getUTCMonth() - from.getUTCMonth());
}

/**
 * The period a renewal at `now` pays for (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md):
 * boundaries are the anchor (the subscription's first start) plus whole months. Normally that is
 * the period right after `periodEnd`. When `now` is past more than one boundary (billing was down,
 * or the subscription stayed past due), the missed periods are skipped, not charged: the new period
 * is the one holding `now`, so one charge buys the time still ahead.
 */
export function nextPeriod(anchor: Date, periodEnd: Date, now: Date): { start: Date; end: Date } {
  const ended = monthsBetween(anchor, periodEnd);
  // Start the search a month before now's month (that boundary is surely not after now).
  let next = Math.max(ended + 1, monthsBetween(anchor, now) - 1);
  while (addCalendarMonths(anchor, next).getTime() <= now.getTime()) next++;
  // The period right after periodEnd starts exactly there, whatever rounding the anchor had.
  const start = next === ended + 1 ? periodEnd : addCalendarMonths(anchor, next - 1);
  return { start, end: addCalendarMonths(anchor, next) };
}
