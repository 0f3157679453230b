/** One bucket of GET /v1/usage/tokens. */
export interface UsageBucket {
  period: string;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
  requests: number;
  local_requests: number;
  hoster_requests: number;
  cloud_requests: number;
}

/** The ranges the usage page offers, in days, and the bucket each is drawn with. */
export const RANGES = [1, 7, 30, 90] as const;
export type Range = (typeof RANGES)[number];

export function intervalFor(days: Range): "hour" | "day" {
  return days === 1 ? "hour" : "day";
}

/** Columns for a chart: x in Unix seconds (what uPlot takes), then one array per series. */
export type Columns = [number[], ...number[][]];

export function tokenColumns(series: UsageBucket[]): Columns {
  return [
    series.map((b) => Date.parse(b.period) / 1000),
    series.map((b) => b.input_tokens),
    series.map((b) => b.output_tokens),
  ];
}

export function costColumns(series: UsageBucket[]): Columns {
  return [series.map((b) => Date.parse(b.period) / 1000), series.map((b) => b.cost_usd)];
}

export function requestColumns(series: UsageBucket[]): Columns {
  return [
    series.map((b) => Date.parse(b.period) / 1000),
    series.map((b) => b.local_requests),
    series.map((b) => b.hoster_requests),
    series.map((b) => b.cloud_requests),
  ];
}
