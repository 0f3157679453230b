import type { HourUptime } from "../lib/endpoint-figures.ts";

/** Below this an hour's bar is drawn as failing (the routing's uptime floor). */
const FLOOR = 0.8;

const hourLabel = (h: HourUptime) => {
  const at = new Date(h.hour_start).toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" });
  return h.uptime === null
    ? `${at}: no requests`
    : `${at}: ${(h.uptime * 100).toFixed(1)}% of ${h.successes + h.faults}`;
};

/**
 * The last day's uptime, one bar per hour (oldest left), as status pages draw it: a full bar for an
 * hour with requests, green at or above the 80% floor routing holds endpoints to and red below it,
 * a grey stub for an hour with none. Its text alternative is a summary; each bar's title gives the
 * hour.
 */
export function UptimeBars({ hours, label }: { hours: HourUptime[]; label: string }) {
  const judged = hours.filter((h) => h.uptime !== null);
  const below = judged.filter((h) => h.uptime! < FLOOR).length;
  const summary =
    judged.length === 0
      ? `${label}: no requests in the last day`
      : `${label}: ${judged.length} of the last 24 hours had requests; ${below} below ${FLOOR * 100}% uptime`;
  return (
    <svg className="uptime-bars" viewBox="0 0 96 20" role="img" aria-label={summary} preserveAspectRatio="none">
      {hours.map((h, i) => {
        const height = h.uptime === null ? 3 : 20;
        const kind = h.uptime === null ? "none" : h.uptime < FLOOR ? "low" : "up";
        return (
          <rect key={h.hour_start} className={kind} x={i * 4 + 0.5} y={20 - height} width={3} height={height}>
            <title>{hourLabel(h)}</title>
          </rect>
        );
      })}
    </svg>
  );
}
