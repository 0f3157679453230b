import { useState } from "react";
import { UptimeBars } from "../components/uptime-bars.tsx";
import { Empty, ErrorNote, Loading, Table, type Column } from "../components/ui.tsx";
import { ms, uptime, type Stats, type Verification } from "../lib/endpoint-figures.ts";
import { count, usd } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";

interface OpenModel {
  id: string;
  provider: string;
  context_window: number;
  endpoints: number;
  lowest_input_price_per_1m_usd: number;
  lowest_output_price_per_1m_usd: number;
  lowest_cached_input_price_per_1m_usd: number;
}

interface Endpoint {
  hoster_id: string;
  hoster_name: string;
  status: string;
  quantization: string;
  context_window: number;
  input_price_per_1m_usd: number;
  output_price_per_1m_usd: number;
  /** The plan's cached price, or its input price where it sets none. */
  cached_input_price_per_1m_usd: number;
  stats: Stats;
  verification: Verification;
}

const COLUMNS: Column[] = [
  { label: "Hoster" },
  { label: "Per 1M tokens", numeric: true },
  { label: "Uptime 30 min", numeric: true },
  { label: "By hour, last day" },
  { label: "Latency p50", numeric: true },
  { label: "Tokens/s", numeric: true },
  { label: "Verification" },
];

/**
 * A verdict, with the checks its last run failed (what a customer should know before choosing it);
 * a failed check that is shown but not held (a cache discount not given) does not degrade it.
 */
function VerdictCell({ verification }: { verification: Verification }) {
  const failed = verification.checks.filter((c) => !c.passed && c.held).map((c) => c.check);
  const shown = verification.checks.filter((c) => !c.passed && !c.held).map((c) => c.check);
  return (
    <>
      <span className={`badge ${verification.status}`}>{verification.status}</span>
      {failed.length > 0 && <span className="muted"> failed: {failed.join(", ")}</span>}
      {shown.length > 0 && (
        <span className="muted">
          {failed.length > 0 && ";"} not held: {shown.join(", ")}
        </span>
      )}
    </>
  );
}

/** One open model's endpoints, as GET /v1/models/{id}/endpoints lists them (cheapest first). */
function Endpoints({ model }: { model: OpenModel }) {
  const endpoints = useApi<{ data: { endpoints: Endpoint[] } }>(`/v1/models/${model.id}/endpoints`);
  if (endpoints.error) return <ErrorNote message={endpoints.error} />;
  if (endpoints.loading && !endpoints.data) return <Loading what="endpoints" />;
  const rows = (endpoints.data?.data.endpoints ?? []).map((e) => ({
    key: e.hoster_id,
    cells: [
      <>
        {e.hoster_name}{" "}
        <span className="muted">
          {e.quantization}, {count(e.context_window)} context
        </span>
        {e.status !== "healthy" && <span className={`badge ${e.status}`}>{e.status}</span>}
      </>,
      // One figure a line: side by side, they made the table wider than a desktop page.
      <span className="lines">
        <span>{usd(e.input_price_per_1m_usd)} in</span>
        <span>{usd(e.cached_input_price_per_1m_usd)} cached in</span>
        <span>{usd(e.output_price_per_1m_usd)} out</span>
      </span>,
      uptime(e.stats.last_30m),
      <UptimeBars hours={e.stats.hours} label={`${e.hoster_name} uptime`} />,
      <span className="lines">
        <span>{ms(e.stats.last_30m.ttft_p50_ms)} first token</span>
        <span>{ms(e.stats.last_30m.latency_p50_ms)} total</span>
      </span>,
      e.stats.last_30m.tokens_per_second_p50 ?? "–",
      <VerdictCell verification={e.verification} />,
    ],
  }));
  return <Table caption={`Endpoints of ${model.id}`} columns={COLUMNS} rows={rows} />;
}

/**
 * Open models (GET /v1/models, provider `open`): each called with any key by its public name and
 * routed among its endpoints by price, speed and verification (docs/routing.md). A customer picks
 * one to compare its endpoints.
 */
export function ModelsPage() {
  const models = useApi<{ data: OpenModel[] }>("/v1/models");
  const [chosen, setChosen] = useState<string>();
  if (models.error) return <ErrorNote message={models.error} />;
  if (models.loading && !models.data) return <Loading what="models" />;
  const open = (models.data?.data ?? []).filter((m) => m.provider === "open");
  if (open.length === 0) return <Empty>No hoster serves a model on an open plan yet.</Empty>;
  const shown = open.find((m) => m.id === chosen) ?? open[0]!;
  return (
    <>
      <p className="muted">
        Call any of these with your API key by its name: each request goes to one of its hosters, the cheaper ones more
        often, those failing or failing verification only as a fallback. Add{" "}
        <code>
          "provider": {"{"}"sort": "price"{"}"}
        </code>{" "}
        to choose by price, latency or throughput instead.
      </p>
      <ul className="model-list">
        {open.map((m) => (
          <li key={m.id}>
            <button type="button" aria-pressed={m.id === shown.id} onClick={() => setChosen(m.id)}>
              <code>{m.id}</code>
            </button>{" "}
            <span className="muted">
              {m.endpoints === 1 ? "1 endpoint" : `${count(m.endpoints)} endpoints`}, from{" "}
              {usd(m.lowest_input_price_per_1m_usd)} / {usd(m.lowest_output_price_per_1m_usd)} per 1M tokens
              {m.lowest_cached_input_price_per_1m_usd < m.lowest_input_price_per_1m_usd &&
                `, cached input from ${usd(m.lowest_cached_input_price_per_1m_usd)}`}
            </span>
          </li>
        ))}
      </ul>
      <section className="card" aria-labelledby="endpoints-heading">
        <h2 id="endpoints-heading">
          <code>{shown.id}</code>
        </h2>
        <Endpoints key={shown.id} model={shown} />
      </section>
    </>
  );
}
