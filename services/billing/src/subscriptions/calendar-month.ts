/**
 * The end of a period that starts at `start` (DESIGN.md §3): the same day and time of day one
 * calendar month later, in UTC, clamped to the last day of that month (Jan 31 → Feb 28 or 29).
 */
export function addCalendarMonth(start: Date): Date {
  const year = start.getUTCFullYear();
  const month = start.getUTCMonth() + 1; // Date.UTC carries month 12 into the next year
  const lastDay = new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
  return new Date(
    Date.UTC(
      year,
      month,
      Math.min(start.getUTCDate(), lastDay),
      start.getUTCHours(),
      start.getUTCMinutes(),
      start.getUTCSeconds(),
      start.getUTCMilliseconds(),
    ),
  );
}
