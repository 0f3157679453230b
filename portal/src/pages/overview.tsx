import { Link } from "../components/link.tsx";
import { ErrorNote, Loading, Stat } from "../components/ui.tsx";
import { count, usd } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";

interface UsageSummary {
  customer: string;
  tier: string;
  credit_balance_usd: number | null;
  rate_limits: Record<
    | "requests_this_minute"
    | "requests_today"
    | "limit_per_minute"
    | "limit_per_day"
    | "remaining_this_minute"
    | "remaining_today",
    number
  >;
  usage_30d: {
    total_requests: number;
    total_input_tokens: number;
    total_cached_input_tokens: number;
    total_output_tokens: number;
    total_cost_microdollars: number;
    avg_latency_ms: number;
  };
}

/** GET /v1/usage: balance, tier, rate limits with what remains, the last 30 days. */
export function OverviewPage() {
  const { data, error, loading } = useApi<UsageSummary>("/v1/usage");
  if (error) return <ErrorNote message={error} />;
  if (loading || !data) return <Loading what="your balance" />;
  const limits = data.rate_limits;
  const usage = data.usage_30d;
  return (
    <>
      <section className="stats" aria-label="Account">
        <Stat label="Credit balance" value={<span data-testid="balance">{usd(data.credit_balance_usd)}</span>} />
        <Stat label="Tier" value={data.tier} />
        <Stat
          label="Requests this minute"
          value={`${count(limits.remaining_this_minute)} left`}
          note={`${count(limits.requests_this_minute)} of ${count(limits.limit_per_minute)} used`}
        />
        <Stat
          label="Requests today (UTC)"
          value={`${count(limits.remaining_today)} left`}
          note={`${count(limits.requests_today)} of ${count(limits.limit_per_day)} used`}
        />
      </section>
      <h2>Last 30 days</h2>
      <section className="stats" aria-label="Last 30 days">
        <Stat label="Requests" value={count(usage.total_requests)} />
        <Stat
          label="Input tokens"
          value={count(usage.total_input_tokens)}
          note={`${count(usage.total_cached_input_tokens)} from cache`}
        />
        <Stat label="Output tokens" value={count(usage.total_output_tokens)} />
        <Stat label="Spent" value={usd(usage.total_cost_microdollars / 1e6)} />
        <Stat label="Average latency" value={`${Math.round(usage.avg_latency_ms)} ms`} />
      </section>
      <p>
        Next: <Link to="/keys">create an API key</Link>, try a model in the <Link to="/playground">playground</Link>, or
        browse the <Link to="/hosters">hosters' plans</Link>.
      </p>
    </>
  );
}
