// The shapes of a run's figures, shared by the scenarios that produce them, the targets that
// judge them (targets.ts) and the report that prints them (report.ts), so neither of the last two
// imports the other.
import type { DatabaseWrites } from "./database-writes.ts";
import type { TargetName } from "./load.ts";
import type { Counters } from "./process-stats.ts";
import type { RssPeaks } from "./rss.ts";
import type { Steps } from "./step-histograms.ts";
import type { Summary } from "./stats.ts";
import type { Verdict } from "./verify.ts";

export interface Goal {
  /** The target as the issue words it. */
  target: string;
  /** The figures it is judged on. */
  value: string;
  pass: boolean | undefined;
  /** Set when the run's knobs differ from the scenario the target is stated for. */
  caveat?: string;
}

export interface LoadRun {
  target: TargetName;
  connections: number;
  seconds: number;
  requests: number;
  rps: number;
  /** Latency of the requests answered 200 with a whole answer, ms. */
  latency: Summary;
  /** Requests that did not end 200 with a whole answer, by status ("0": no response). */
  errors: Record<string, number>;
  /** What each process involved spent per request (bench/gateway/process-stats.ts). */
  perRequest: Record<string, Counters>;
  /** Ours only: the steps before the first event, from the services' histograms. */
  steps?: Steps;
  /** Ours only: what billing's database wrote per request (database-writes.ts). */
  database?: DatabaseWrites;
}

export interface StreamRun {
  target: TargetName;
  streams: number;
  /** Status 200, [DONE] received, no error event. */
  completed: number;
  ttft: Summary;
  total: Summary;
  errors: Record<string, number>;
  /** What each process involved spent per stream (bench/gateway/process-stats.ts). */
  perStream: Record<string, Counters>;
  /** Ours only: the steps before the first token, from the services' histograms. */
  steps?: Steps;
  /** Arrivals only: how late the load generator started each stream against its schedule, ms. */
  arrivalLag?: Summary;
}

export interface SparseRun {
  accounts: number;
  everySeconds: number;
  seconds: number;
  requests: number;
  completed: number;
  latency: Summary;
  /** GrantLease calls billing granted during the run (mkt_lease_grants_total). */
  grants: number;
  /** grants ÷ accounts ÷ each account's minutes of traffic. */
  grantsPerAccountPerMinute: number;
}

export interface Results {
  startedAt: string;
  settings: Record<string, unknown>;
  latency: Partial<Record<TargetName, LoadRun>>;
  throughput: Partial<Record<TargetName, LoadRun>>;
  /** Streams started at once. */
  streams: Partial<Record<TargetName, StreamRun>>;
  /** Streams started at a steady rate. */
  arrivals: Partial<Record<TargetName, StreamRun>>;
  /** Our processes during the streams started at once. */
  rss?: RssPeaks;
  /** Sparse accounts (ours only): how often their requests went to billing for a grant. */
  sparse?: SparseRun;
  verdicts: Verdict[];
  goals: Goal[];
}
