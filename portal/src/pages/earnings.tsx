import { lazy, Suspense, useMemo, useState } from "react";
import { Empty, ErrorNote, Loading, Stat, Table } from "../components/ui.tsx";
import { count, usd } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";
import { RANGES, type Columns, type Range } from "../lib/usage-series.ts";

const Chart = lazy(() => import("../components/chart.tsx"));

interface Earnings {
  total_earned_usd: number;
  payable_usd: number;
  payout_threshold_usd: number;
  payout_eligible: boolean;
  by_plan: Array<{
    product_id: string;
    product_name: string;
    pricing_model: string;
    subscribers: number;
    subscription_fees_usd: number;
    usage_earned_usd: number;
    earned_usd: number;
  }>;
  daily: Array<{ date: string; earned_usd: number }>;
}

interface ByModel {
  by_model: Array<{
    model_id: string;
    requests: number;
    input_tokens: number;
    output_tokens: number;
    earned_usd: number;
  }>;
}

const EARNED_SERIES = [{ label: "Earned (USD)", color: "#15803d" }];
const dollars = (v: number) => usd(v);

/** GET /v1/earnings and /v1/earnings/by-model: over time, by plan, by model, and the payout. */
export function EarningsPage() {
  const [days, setDays] = useState<Range>(30);
  const earnings = useApi<Earnings>(`/v1/earnings?days=${days}`);
  const byModel = useApi<ByModel>(`/v1/earnings/by-model?days=${days}`);
  const columns = useMemo<Columns>(() => {
    const daily = earnings.data?.daily ?? [];
    return [daily.map((d) => Date.parse(`${d.date}T00:00:00Z`) / 1000), daily.map((d) => d.earned_usd)];
  }, [earnings.data]);
  if (earnings.loading && !earnings.data) return <Loading what="earnings" />;
  const e = earnings.data;
  return (
    <>
      <fieldset className="segmented">
        <legend className="visually-hidden">Range</legend>
        {RANGES.map((range) => (
          <label key={range} className={range === days ? "on" : undefined}>
            <input type="radio" name="days" checked={range === days} onChange={() => setDays(range)} />
            {range === 1 ? "24 hours" : `${range} days`}
          </label>
        ))}
      </fieldset>
      <ErrorNote message={earnings.error ?? byModel.error} />
      {e && (
        <section className="stats" aria-label="Earnings">
          <Stat label={`Earned in ${days} days`} value={<span data-testid="earned">{usd(e.total_earned_usd)}</span>} />
          <Stat
            label="Payable now"
            value={usd(e.payable_usd)}
            note={
              e.payout_eligible
                ? "Over the payout threshold."
                : `${usd(Math.max(0, e.payout_threshold_usd - e.payable_usd))} more to reach the ${usd(e.payout_threshold_usd)} payout threshold.`
            }
          />
        </section>
      )}
      {e && e.daily.length > 0 ? (
        <Suspense fallback={<Loading what="chart" />}>
          <Chart title="Earned per day" columns={columns} series={EARNED_SERIES} formatValue={dollars} bars />
        </Suspense>
      ) : (
        <Empty>No earnings in this range yet.</Empty>
      )}
      <h2>By plan</h2>
      {(e?.by_plan.length ?? 0) === 0 ? (
        <Empty>No plan earned anything in this range.</Empty>
      ) : (
        <Table
          caption="Earnings by plan"
          columns={[
            { label: "Plan" },
            { label: "Subscribers", numeric: true },
            { label: "Monthly fees", numeric: true },
            { label: "Usage", numeric: true },
            { label: "Earned", numeric: true },
          ]}
          rows={e!.by_plan.map((p) => ({
            key: p.product_id,
            cells: [
              p.product_name,
              count(p.subscribers),
              usd(p.subscription_fees_usd),
              usd(p.usage_earned_usd),
              usd(p.earned_usd),
            ],
          }))}
        />
      )}
      <h2>By model</h2>
      {(byModel.data?.by_model.length ?? 0) === 0 ? (
        <Empty>No requests served in this range.</Empty>
      ) : (
        <Table
          caption="Earnings by model"
          columns={[
            { label: "Model" },
            { label: "Requests", numeric: true },
            { label: "Input tokens", numeric: true },
            { label: "Output tokens", numeric: true },
            { label: "Earned", numeric: true },
          ]}
          rows={byModel.data!.by_model.map((m) => ({
            key: m.model_id,
            cells: [m.model_id, count(m.requests), count(m.input_tokens), count(m.output_tokens), usd(m.earned_usd)],
          }))}
        />
      )}
    </>
  );
}
