import { EndpointFigures, type EndpointStats, type Verification } from "@mkt/proto/registry/v1/registry";
import { arrayOf, boolean, integer, nullableNumber, nullableString, object, string } from "./response-schemas.ts";

const orNull = (value: bigint | undefined) => (value === undefined ? null : Number(value));

/** One window's figures; a figure with no sample behind it is null. */
function renderFigures(f: EndpointFigures = EndpointFigures.fromPartial({})) {
  return {
    requests: Number(f.requests),
    successes: Number(f.successes),
    faults: Number(f.faults),
    upstream_429s: Number(f.upstream429s),
    uptime: f.uptime ?? null,
    latency_p50_ms: orNull(f.latencyP50Ms),
    latency_p90_ms: orNull(f.latencyP90Ms),
    ttft_p50_ms: orNull(f.ttftP50Ms),
    ttft_p90_ms: orNull(f.ttftP90Ms),
    tokens_per_second_p50: orNull(f.tokensPerSecondP50),
  };
}

/** A hoster model's live figures over the last 30 minutes and the last day, and the day hour by hour. */
export const renderStats = (stats: EndpointStats | undefined) => ({
  last_30m: renderFigures(stats?.last30m),
  last_1d: renderFigures(stats?.last1d),
  hours: (stats?.hours ?? []).map((h) => ({
    hour_start: h.hourStart,
    successes: Number(h.successes),
    faults: Number(h.faults),
    uptime: h.uptime ?? null,
  })),
});

const figuresSchema = object({
  requests: integer(),
  successes: integer(),
  faults: integer("The hoster's failures: a 5xx, a timeout, a broken stream (a client's error is none)"),
  upstream_429s: integer("The hoster's own 429s, neither successes nor faults"),
  uptime: nullableNumber("successes / (successes + faults), 0 to 1; null with neither"),
  latency_p50_ms: nullableNumber("Each percentile is its histogram bucket's upper bound; null with no sample"),
  latency_p90_ms: nullableNumber(),
  ttft_p50_ms: nullableNumber("Time to first token"),
  ttft_p90_ms: nullableNumber(),
  tokens_per_second_p50: nullableNumber("Output tokens per second after the first"),
});

export const statsSchema = object(
  {
    last_30m: figuresSchema,
    last_1d: figuresSchema,
    hours: arrayOf(
      object({
        hour_start: string("ISO 8601 UTC"),
        successes: integer(),
        faults: integer(),
        uptime: nullableNumber("null with neither successes nor faults in the hour"),
      }),
      "The last 24 hours, oldest first, the current hour last; empty for a model with no figures yet",
    ),
  },
  "Live figures from the answers the gateway relayed (docs/api-tour.md#hosters-plans-and-subscriptions)",
);

/** What verification found of a hoster model (docs/verification.md). */
export const renderVerification = (v: Verification | undefined) => ({
  status: v?.status || "unverified",
  last_run_at: v?.lastRunAt || null,
  checks: (v?.checks ?? []).map((c) => ({ check: c.check, passed: c.passed, held: c.held, detail: c.detail })),
});

export const verificationSchema = object(
  {
    status: string(
      "`unverified`, `verified` (its last run passed) or `degraded` (its last two failed: a fallback only)",
    ),
    last_run_at: nullableString(),
    checks: arrayOf(
      object({
        check: string(
          "`model_listed`, `token_honesty`, `output_cap`, `tool_calls`, `streaming_usage` or `cache_discount` " +
            "(only where a plan discounts cached input: failed means the cache discount was not given)",
        ),
        passed: boolean(),
        held: boolean("Whether its failure fails the run (`streaming_usage` and `cache_discount` are shown only)"),
        detail: string(),
      }),
    ),
  },
  "Registry's verification probes of the model (docs/verification.md)",
);
