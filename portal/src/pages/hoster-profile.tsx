import { ErrorNote, Loading, Stat } from "../components/ui.tsx";
import { count, when } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";
import type { Stats, Verification } from "../lib/endpoint-figures.ts";
import { FiguresTable, VerificationNote } from "../components/model-figures.tsx";

interface Me {
  name: string;
  email: string;
  status: string;
  endpoint_url: string;
  last_checked_at: string | null;
  consecutive_failures: number;
  usage_mismatches: number;
  models: Array<{
    model_id: string;
    model_alias: string;
    context_window: number;
    canonical_id: string;
    quantization: string;
    stats: Stats;
    verification: Verification;
  }>;
}

/** GET /hosters/me: profile, endpoint, models (with their live figures and verification) and health. */
export function HosterProfilePage() {
  const { data, error, loading } = useApi<Me>("/hosters/me");
  if (error) return <ErrorNote message={error} />;
  if (loading || !data) return <Loading what="your profile" />;
  return (
    <>
      <section className="stats" aria-label="Health">
        <Stat label="Name" value={data.name} />
        <Stat
          label="Health"
          value={<span className={`badge ${data.status}`}>{data.status}</span>}
          note={`checked ${when(data.last_checked_at)}`}
        />
        <Stat label="Failed checks in a row" value={data.consecutive_failures} />
        <Stat label="Usage reports that disagreed" value={data.usage_mismatches} />
      </section>
      <h2>Server</h2>
      <p>
        <code className="wrap">{data.endpoint_url}</code>
      </p>
      <h2>Models</h2>
      <ul className="models">
        {data.models.map((m) => (
          <li key={m.model_id}>
            <strong>{m.model_alias || m.model_id}</strong> · file <code>{m.model_id}</code> · serves{" "}
            <code>{m.canonical_id}</code> ({m.quantization}) · {count(m.context_window)} tokens of context
            <VerificationNote verification={m.verification} />
            <FiguresTable stats={m.stats} caption={`Live figures of ${m.model_alias || m.model_id}`} />
          </li>
        ))}
      </ul>
    </>
  );
}
