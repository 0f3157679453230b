/**
 * The gateway benchmark's performance targets (the data plane's, set when the relay moved into the
 * edge, and the money path's, set when settlement moved to one entry per batch), and how each is
 * read from a run's figures. This is the one place they are stated: the bench prints
 * them as PASS/FAIL (report.ts) and bench/README.md lists them as `targetsMarkdown()` renders
 * them (test/bench/targets.test.ts keeps the two equal). The scenario sizes they are stated for
 * are the bench's default knobs (config.ts); a run with other knobs says so beside the verdict.
 */
import type { BenchConfig } from "./config.ts";
import type { Goal, LoadRun, Results, StreamRun } from "./results.ts";
import { TARGET_SCENARIOS } from "./scenarios.ts";
import type { TargetName } from "./load.ts";
import { served, type Counters } from "./process-stats.ts";

/** The limits: ratios are ours ÷ the peer's (added figures: minus the direct call's). */
export const LIMITS = {
  throughputVsPeer: 1.5,
  addedMeanLatencyVsPeer: 1.0,
  /** Both the p50 and the p99 of the added time to first token. */
  addedTtftVsPeer: 0.4,
  cpuPerRequestVsPeer: 0.8,
  billingPostgresCpuMsPerRequest: 0.1,
  natsCpuMsPerRequest: 0.05,
  edgeRssMb: 400,
  sparseGrantsPerAccountPerMinute: 1,
} as const;

const S = TARGET_SCENARIOS;
const L = LIMITS;
const thousands = (n: number) => n.toLocaleString("en");
const BURST = `${thousands(S.streams)} streams at once`;
const ARRIVALS = `${S.arrivalRate} new streams per second for ${S.arrivalSeconds} s`;
const SPARSE = `${thousands(S.sparseAccounts)} accounts each sending one request every ${S.sparseEverySeconds} s for ${S.sparseSeconds} s`;

const fmt = (n: number | undefined, digits = 1) =>
  n === undefined || !Number.isFinite(n)
    ? "–"
    : n.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits });
/** ours ÷ peer for display; only meaningful when the peer's figure is positive. */
const times = (ours: number, peer: number) => (peer > 0 ? `${fmt(ours / peer, 2)}×, ` : "");

type Judged = Pick<Goal, "value" | "pass">;
const UNMEASURED: Judged = { value: "not measured", pass: undefined };

interface TargetSpec {
  target: string;
  judge(r: Results): Judged;
  /** Why this run is not the target's scenario, if it is not. */
  caveat?(c: BenchConfig): string | undefined;
}

const addedMean = (runs: Results["latency"], t: TargetName) =>
  runs[t] && runs.direct ? runs[t].latency.mean - runs.direct.latency.mean : undefined;
const addedTtft = (runs: Partial<Record<TargetName, StreamRun>>, t: TargetName, q: "p50" | "p99") =>
  runs[t] && runs.direct ? runs[t].ttft[q] - runs.direct.ttft[q] : undefined;
const errorCount = (run: LoadRun) => Object.values(run.errors).reduce((a, b) => a + b, 0);

function everyStreamComplete(run: StreamRun | undefined): Judged {
  if (!run) return UNMEASURED;
  return {
    value: `${thousands(run.completed)}/${thousands(run.streams)} complete`,
    pass: run.completed === run.streams,
  };
}

/** Added TTFT p50 and p99, each judged: the target holds only when both do. */
function addedTtftVsPeer(runs: Partial<Record<TargetName, StreamRun>>): Judged {
  const figures = (["p50", "p99"] as const).map((q) => ({
    q,
    ours: addedTtft(runs, "ours", q),
    peer: addedTtft(runs, "peer", q),
  }));
  if (figures.some((f) => f.ours === undefined || f.peer === undefined)) return UNMEASURED;
  return {
    value: figures.map((f) => `${f.q} ${times(f.ours!, f.peer!)}${fmt(f.ours)} against ${fmt(f.peer)} ms`).join("; "),
    pass: figures.every((f) => f.ours! <= L.addedTtftVsPeer * f.peer!),
  };
}

/** Our processes' CPU per request summed, the upstream (and the load generator) aside, against the peer's. */
function cpuPerRequestVsPeer(
  ours: Record<string, Counters> | undefined,
  peer: Record<string, Counters> | undefined,
): Judged {
  if (!ours || !peer) return UNMEASURED;
  const withoutUpstream = (stats: Record<string, Counters>) =>
    served(Object.fromEntries(Object.entries(stats).filter(([name]) => name !== "upstream"))).cpuMs;
  const o = withoutUpstream(ours);
  const p = withoutUpstream(peer);
  return {
    value: `${times(o, p)}${fmt(o, 2)} against ${fmt(p, 2)} ms (upstream aside)`,
    pass: o <= L.cpuPerRequestVsPeer * p,
  };
}

const burstCaveat = (c: BenchConfig) =>
  c.streams === S.streams ? undefined : `run with ${thousands(c.streams)} streams (BENCH_STREAMS)`;
const arrivalsCaveat = (c: BenchConfig) =>
  c.arrivalRate === S.arrivalRate && c.arrivalSeconds === S.arrivalSeconds
    ? undefined
    : `run at ${c.arrivalRate}/s for ${c.arrivalSeconds} s (BENCH_ARRIVAL_RATE, BENCH_ARRIVAL_SECONDS)`;

const sparseCaveat = (c: BenchConfig) =>
  c.sparseAccounts === S.sparseAccounts &&
  c.sparseEverySeconds === S.sparseEverySeconds &&
  c.sparseSeconds === S.sparseSeconds
    ? undefined
    : `run with ${thousands(c.sparseAccounts)} accounts every ${c.sparseEverySeconds} s for ${c.sparseSeconds} s (BENCH_SPARSE_*)`;

const TARGETS: TargetSpec[] = [
  {
    target: `throughput at ${S.throughputConnections} connections ≥ ${fmt(L.throughputVsPeer)}× the peer, with auth + admission + metering + billing on and 0 errors`,
    judge({ throughput: { ours, peer } }) {
      if (!ours || !peer) return UNMEASURED;
      const errors = errorCount(ours);
      return {
        value: `${times(ours.rps, peer.rps)}${fmt(ours.rps, 0)} against ${fmt(peer.rps, 0)} requests/s, ${errors} errors`,
        pass: ours.rps >= L.throughputVsPeer * peer.rps && errors === 0,
      };
    },
    caveat: (c) =>
      c.throughputConnections === S.throughputConnections
        ? undefined
        : `run at ${c.throughputConnections} connections (BENCH_THROUGHPUT_CONNECTIONS)`,
  },
  {
    target: `added mean latency at one connection ≤ ${fmt(L.addedMeanLatencyVsPeer)}× the peer's`,
    judge({ latency }) {
      const ours = addedMean(latency, "ours");
      const peer = addedMean(latency, "peer");
      if (ours === undefined || peer === undefined) return UNMEASURED;
      return {
        value: `${times(ours, peer)}${fmt(ours, 2)} against ${fmt(peer, 2)} ms`,
        pass: ours <= L.addedMeanLatencyVsPeer * peer,
      };
    },
  },
  { target: `${BURST}: every stream complete`, judge: (r) => everyStreamComplete(r.streams.ours), caveat: burstCaveat },
  {
    target: `${BURST}: added TTFT p50 and p99 ≤ ${fmt(L.addedTtftVsPeer)}× the peer's`,
    judge: (r) => addedTtftVsPeer(r.streams),
    caveat: burstCaveat,
  },
  {
    target: `${ARRIVALS}: every stream complete`,
    judge: (r) => everyStreamComplete(r.arrivals.ours),
    caveat: arrivalsCaveat,
  },
  {
    target: `${ARRIVALS}: added TTFT p50 and p99 ≤ ${fmt(L.addedTtftVsPeer)}× the peer's`,
    judge: (r) => addedTtftVsPeer(r.arrivals),
    caveat: arrivalsCaveat,
  },
  {
    target: `CPU per request at ${S.throughputConnections} connections, our processes summed (the upstream and the load generator aside) ≤ ${fmt(L.cpuPerRequestVsPeer)}× the peer's`,
    judge: ({ throughput: { ours, peer } }) => cpuPerRequestVsPeer(ours?.perRequest, peer?.perRequest),
  },
  {
    target: `billing + Postgres CPU per request ≤ ${fmt(L.billingPostgresCpuMsPerRequest)} ms`,
    judge({ throughput: { ours } }) {
      const billing = ours?.perRequest.billing?.cpuMs;
      const postgres = ours?.perRequest.postgres?.cpuMs;
      if (billing === undefined || postgres === undefined) return UNMEASURED;
      return {
        value: `${fmt(billing + postgres, 2)} ms (billing ${fmt(billing, 2)}, PostgreSQL ${fmt(postgres, 2)}) at ${ours!.connections} connections`,
        pass: billing + postgres <= L.billingPostgresCpuMsPerRequest,
      };
    },
  },
  {
    target: `NATS CPU per request ≤ ${fmt(L.natsCpuMsPerRequest, 2)} ms`,
    judge({ throughput: { ours } }) {
      const nats = ours?.perRequest.nats?.cpuMs;
      if (nats === undefined) return UNMEASURED;
      return { value: `${fmt(nats, 3)} ms at ${ours!.connections} connections`, pass: nats <= L.natsCpuMsPerRequest };
    },
  },
  {
    target: `RSS of the edge at ${thousands(S.streams)} streams ≤ ${L.edgeRssMb} MB`,
    judge({ rss }) {
      const edge = rss?.peakMb.edge;
      if (edge === undefined) return UNMEASURED;
      const registry = rss?.peakMb.registry;
      return {
        value: `${fmt(edge, 0)} MB peak${registry === undefined ? "" : ` (registry ${fmt(registry, 0)})`}`,
        pass: edge <= L.edgeRssMb,
      };
    },
    caveat: burstCaveat,
  },
  {
    target: `${SPARSE}: GrantLease calls ≤ ${fmt(L.sparseGrantsPerAccountPerMinute)} per account per minute, 0 errors`,
    judge({ sparse }) {
      if (!sparse) return UNMEASURED;
      const errors = sparse.requests - sparse.completed;
      return {
        value: `${fmt(sparse.grantsPerAccountPerMinute, 2)} (${thousands(sparse.grants)} grants, ${thousands(sparse.requests)} requests), ${errors} errors`,
        pass: sparse.grantsPerAccountPerMinute <= L.sparseGrantsPerAccountPerMinute && errors === 0,
      };
    },
    caveat: sparseCaveat,
  },
];

/** Every target judged on a run's figures. */
export function goals(r: Results, c: BenchConfig): Goal[] {
  return TARGETS.map((t) => ({ target: t.target, ...t.judge(r), caveat: t.caveat?.(c) }));
}

/** The targets as bench/README.md lists them. */
export function targetsMarkdown(): string {
  return TARGETS.map((t) => `- ${t.target}`).join("\n");
}
