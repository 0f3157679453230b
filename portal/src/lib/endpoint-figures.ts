/** A hoster model's live figures over one window, as the hoster views show them. */
export interface Figures {
  requests: number;
  successes: number;
  faults: number;
  upstream_429s: number;
  uptime: number | null;
  latency_p50_ms: number | null;
  latency_p90_ms: number | null;
  ttft_p50_ms: number | null;
  ttft_p90_ms: number | null;
  tokens_per_second_p50: number | null;
}

/** One hour's uptime (the last 24, oldest first). */
export interface HourUptime {
  hour_start: string;
  successes: number;
  faults: number;
  uptime: number | null;
}

export interface Stats {
  last_30m: Figures;
  last_1d: Figures;
  hours: HourUptime[];
}

/** What verification found (docs/verification.md). */
export interface Verification {
  status: "unverified" | "verified" | "degraded";
  last_run_at: string | null;
  checks: Array<{ check: string; passed: boolean; held: boolean; detail: string }>;
}

/** An uptime as a percentage with one decimal, or a dash with no answer behind it. */
export const uptime = (f: Figures) => (f.uptime === null ? "–" : `${(f.uptime * 100).toFixed(1)}%`);

/** Milliseconds, or a dash with no sample. */
export const ms = (value: number | null) => (value === null ? "–" : `${value.toLocaleString("en-US")} ms`);
