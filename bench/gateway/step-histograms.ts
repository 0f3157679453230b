/**
 * Where our requests waited before their first token, read from the services' own Prometheus
 * histograms (scraped before and after a measured run, so warm-ups and earlier runs drop out):
 * the edge's admission (against its lease), the relay's upstream first event and the edge's first
 * event; and, after the answer, how long its usage event took to be durable. The quantiles
 * are interpolated within buckets, as PromQL's histogram_quantile does, so they are as coarse as
 * the buckets (a few per decade).
 */

/** A histogram's samples for one label set: cumulative counts by upper bound, the count and the sum. */
interface Series {
  buckets: Map<number, number>;
  count: number;
  sum: number;
}

/** The histograms the bench reads, each selected by its name and label set as exposed. */
const STEPS = {
  admit: { source: "edge", series: "mkt_chat_admit_seconds" },
  // The GrantLease calls admission made (their count: how many went to billing).
  grant: { source: "edge", series: "mkt_lease_grant_seconds" },
  upstreamFirstEvent: { source: "edge", series: 'mkt_upstream_first_event_seconds{provider="local"}' },
  firstEventStreamed: { source: "edge", series: 'mkt_chat_first_event_seconds{stream="true"}' },
  firstEventWhole: { source: "edge", series: 'mkt_chat_first_event_seconds{stream="false"}' },
  // The usage event's durability (its cost): each answer's last bytes wait for it. Events that
  // went to billing's RecordUsage are not timed here.
  usageDurable: { source: "edge", series: 'mkt_usage_durable_seconds{via="jetstream"}' },
} as const;

export type StepName = keyof typeof STEPS;

/** One step over a run: how many were observed, their mean and estimated quantiles, ms. */
export interface StepFigures {
  count: number;
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
}

export type Steps = Partial<Record<StepName, StepFigures>>;

export interface MetricsSources {
  edge: string;
  registry: string;
}

type Snapshot = Map<string, Series>;

/** Splits `name_bucket{a="x",le="0.5"}` into the series key `name{a="x"}`, the suffix and `le`. */
function parseSample(sample: string): { key: string; suffix: string; le?: number } | undefined {
  const match = /^([a-z_:][a-z0-9_:]*?)(_bucket|_count|_sum)(?:\{(.*)\})?$/.exec(sample);
  if (!match) return undefined;
  const [, name, suffix, labels = ""] = match;
  let le: number | undefined;
  const rest = labels
    .split(/,(?=[a-z_]+=")/)
    .filter((pair) => {
      if (!pair.startsWith("le=")) return pair !== "";
      le = pair === 'le="+Inf"' ? Infinity : Number(pair.slice(4, -1));
      return false;
    })
    .join(",");
  return { key: rest === "" ? name! : `${name}{${rest}}`, suffix: suffix!, le };
}

async function scrape(url: string): Promise<Snapshot> {
  const response = await fetch(url);
  if (response.status !== 200) throw new Error(`GET ${url} answered ${response.status}`);
  const snapshot: Snapshot = new Map();
  for (const line of (await response.text()).split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    const parsed = parseSample(line.slice(0, at));
    if (!parsed) continue;
    const value = Number(line.slice(at + 1));
    let series = snapshot.get(parsed.key);
    if (!series) snapshot.set(parsed.key, (series = { buckets: new Map(), count: 0, sum: 0 }));
    if (parsed.suffix === "_count") series.count = value;
    else if (parsed.suffix === "_sum") series.sum = value;
    else if (parsed.le !== undefined) series.buckets.set(parsed.le, value);
  }
  return snapshot;
}

/** The q-quantile of what `after` observed beyond `before`, interpolated within its bucket, ms. */
function quantileMs(before: Series | undefined, after: Series, q: number): number {
  const bounds = [...after.buckets.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => after.buckets.get(le)! - (before?.buckets.get(le) ?? 0));
  const total = counts.at(-1) ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  const i = counts.findIndex((cumulative) => cumulative >= rank);
  const upper = bounds[i]!;
  const lower = i === 0 ? 0 : bounds[i - 1]!;
  // Past the last finite bound nothing better than that bound is known.
  if (upper === Infinity) return lower * 1000;
  const below = i === 0 ? 0 : counts[i - 1]!;
  return (lower + ((upper - lower) * (rank - below)) / (counts[i]! - below)) * 1000;
}

/** Scrapes both services now; `finish()` scrapes again and returns each step's figures between. */
export async function watchSteps(sources: MetricsSources): Promise<{ finish(): Promise<Steps> }> {
  const read = async () => ({ edge: await scrape(sources.edge), registry: await scrape(sources.registry) });
  const start = await read();
  return {
    async finish() {
      const end = await read();
      const steps: Steps = {};
      for (const [name, { source, series }] of Object.entries(STEPS) as Array<[StepName, (typeof STEPS)[StepName]]>) {
        const after = end[source].get(series);
        const before = start[source].get(series);
        const count = (after?.count ?? 0) - (before?.count ?? 0);
        if (!after || count === 0) continue;
        steps[name] = {
          count,
          meanMs: ((after.sum - (before?.sum ?? 0)) / count) * 1000,
          p50Ms: quantileMs(before, after, 0.5),
          p99Ms: quantileMs(before, after, 0.99),
        };
      }
      return steps;
    },
  };
}

const LABELS: Record<StepName, string> = {
  admit: "admission",
  grant: "lease grants",
  upstreamFirstEvent: "upstream's first event",
  firstEventStreamed: "edge's first chunk",
  firstEventWhole: "edge's whole completion",
  usageDurable: "usage event durable (JetStream ack)",
};

/** One line: each step's mean, p50 and p99 in ms. */
export function stepsLine(steps: Steps): string {
  const ms = (n: number) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : 0) : "–");
  return (
    (Object.keys(LABELS) as StepName[])
      .filter((name) => steps[name])
      .map((name) => {
        const s = steps[name]!;
        const count = name === "grant" ? ` ${s.count}` : "";
        return `${LABELS[name]}${count} mean ${ms(s.meanMs)} p50 ${ms(s.p50Ms)} p99 ${ms(s.p99Ms)} ms`;
      })
      .join("; ") || "no chat observed"
  );
}
