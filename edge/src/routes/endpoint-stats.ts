import { EndpointFigures, type EndpointStats } from "@mkt/proto/registry/v1/registry";
import { integer, nullableNumber, object } from "./response-schemas.ts";

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

/** A hoster model's live figures over the last 30 minutes and the last day. */
export const renderStats = (stats: EndpointStats | undefined) => ({
  last_30m: renderFigures(stats?.last30m),
  last_1d: renderFigures(stats?.last1d),
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
  { last_30m: figuresSchema, last_1d: figuresSchema },
  "Live figures from the answers the gateway relayed (docs/api-tour.md#hosters-plans-and-subscriptions)",
);
