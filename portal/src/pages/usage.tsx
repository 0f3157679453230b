import { lazy, Suspense, useMemo, useState } from "react";
import { Empty, ErrorNote, Loading, Table } from "../components/ui.tsx";
import { count, usd } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";
import {
  costColumns,
  intervalFor,
  RANGES,
  requestColumns,
  tokenColumns,
  type Range,
  type UsageBucket,
} from "../lib/usage-series.ts";

const Chart = lazy(() => import("../components/chart.tsx"));

interface Breakdown {
  by_model: Array<{
    model_id: string;
    provider: string;
    requests: number;
    input_tokens: number;
    cached_input_tokens: number;
    output_tokens: number;
    total_cost_usd: number;
    avg_latency_ms: number;
  }>;
}

const TOKEN_SERIES = [
  { label: "Input tokens", color: "#2563eb" },
  { label: "Output tokens", color: "#c2410c" },
];
const COST_SERIES = [{ label: "Cost (USD)", color: "#15803d" }];
const KIND_SERIES = [
  { label: "Local", color: "#2563eb" },
  { label: "Hoster", color: "#7c3aed" },
  { label: "Cloud", color: "#0891b2" },
];
const dollars = (v: number) => usd(v);

/** Usage over 1/7/30/90 days: charts, the breakdown by model, the CSV export. */
export function UsagePage() {
  const [days, setDays] = useState<Range>(30);
  const series = useApi<{ timeseries: UsageBucket[]; totals: { requests: number } }>(
    `/v1/usage/tokens?days=${days}&interval=${intervalFor(days)}`,
  );
  const breakdown = useApi<Breakdown>(`/v1/usage/breakdown?days=${days}`);
  const columns = useMemo(() => {
    const buckets = series.data?.timeseries ?? [];
    return { tokens: tokenColumns(buckets), cost: costColumns(buckets), kinds: requestColumns(buckets) };
  }, [series.data]);
  return (
    <>
      <div className="row toolbar">
        <fieldset className="segmented">
          <legend className="visually-hidden">Range</legend>
          {RANGES.map((range) => (
            <label key={range} className={range === days ? "on" : undefined}>
              <input type="radio" name="days" checked={range === days} onChange={() => setDays(range)} />
              {range === 1 ? "24 hours" : `${range} days`}
            </label>
          ))}
        </fieldset>
        <a className="button secondary" href={`/v1/usage/export?days=${days}`} download>
          Download CSV
        </a>
      </div>
      <ErrorNote message={series.error ?? breakdown.error} />
      {series.loading && !series.data ? (
        <Loading what="usage" />
      ) : (series.data?.totals.requests ?? 0) === 0 ? (
        <Empty>No requests in this range yet. Try the playground.</Empty>
      ) : (
        <Suspense fallback={<Loading what="charts" />}>
          <div className="charts">
            <Chart title="Tokens" columns={columns.tokens} series={TOKEN_SERIES} whole />
            <Chart title="Cost" columns={columns.cost} series={COST_SERIES} formatValue={dollars} />
            <Chart title="Requests by serving kind" columns={columns.kinds} series={KIND_SERIES} bars whole />
          </div>
        </Suspense>
      )}
      <h2>By model</h2>
      {(breakdown.data?.by_model.length ?? 0) === 0 ? (
        <Empty>Nothing to break down yet.</Empty>
      ) : (
        <Table
          caption="Usage by model"
          columns={[
            { label: "Model" },
            { label: "Served by" },
            { label: "Requests", numeric: true },
            { label: "Input tokens", numeric: true },
            { label: "Cached input tokens", numeric: true },
            { label: "Output tokens", numeric: true },
            { label: "Cost", numeric: true },
            { label: "Avg latency", numeric: true },
          ]}
          rows={breakdown.data!.by_model.map((m) => ({
            key: `${m.model_id}/${m.provider}`,
            cells: [
              m.model_id,
              m.provider,
              count(m.requests),
              count(m.input_tokens),
              count(m.cached_input_tokens),
              count(m.output_tokens),
              usd(m.total_cost_usd),
              `${Math.round(m.avg_latency_ms)} ms`,
            ],
          }))}
        />
      )}
    </>
  );
}
