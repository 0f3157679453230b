/** The benchmark's knobs: every one an environment variable with a default (listed in bench/gateway.ts). */
import { TARGET_SCENARIOS } from "./scenarios.ts";

const num = (name: string, fallback: number): number => {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a number ≥ 0, got ${JSON.stringify(raw)}`);
  return n;
};
const flag = (name: string, fallback: boolean): boolean => {
  const raw = process.env[name];
  return raw === undefined || raw === "" ? fallback : !["0", "false", "no"].includes(raw.toLowerCase());
};

/** Our processes a run may profile (BENCH_CPU_PROFILE), by the names the bench starts them under. */
const PROFILABLE = ["edge", "registry", "billing", "accounts"];

function profiledProcesses(raw: string): string[] {
  const names = raw
    .split(",")
    .map((name) => name.trim())
    .filter(Boolean);
  const unknown = names.filter((name) => !PROFILABLE.includes(name));
  if (unknown.length > 0) {
    throw new Error(`BENCH_CPU_PROFILE names ${unknown.join(", ")}; it takes ${PROFILABLE.join(", ")}`);
  }
  return names;
}

export const config = {
  accounts: num("BENCH_ACCOUNTS", 200),
  model: process.env.BENCH_MODEL ?? "demo-small",
  warmupSeconds: num("BENCH_WARMUP_SECONDS", 2),
  latencySeconds: num("BENCH_LATENCY_SECONDS", 10),
  throughputSeconds: num("BENCH_THROUGHPUT_SECONDS", 20),
  throughputConnections: num("BENCH_THROUGHPUT_CONNECTIONS", TARGET_SCENARIOS.throughputConnections),
  shortTokens: num("BENCH_SHORT_TOKENS", 16),
  streams: num("BENCH_STREAMS", TARGET_SCENARIOS.streams),
  streamWarmup: num("BENCH_STREAM_WARMUP", 20),
  streamTokens: num("BENCH_STREAM_TOKENS", 200),
  streamTokensPerSecond: num("BENCH_STREAM_TOKENS_PER_SECOND", 50),
  streamTimeoutSeconds: num("BENCH_STREAM_TIMEOUT_SECONDS", 60),
  arrivalRate: num("BENCH_ARRIVAL_RATE", TARGET_SCENARIOS.arrivalRate),
  arrivalSeconds: num("BENCH_ARRIVAL_SECONDS", TARGET_SCENARIOS.arrivalSeconds),
  streamsPeer: flag("BENCH_STREAMS_PEER", true),
  streamPreconnect: flag("BENCH_STREAM_PRECONNECT", true),
  sparseAccounts: num("BENCH_SPARSE_ACCOUNTS", TARGET_SCENARIOS.sparseAccounts),
  sparseEverySeconds: num("BENCH_SPARSE_EVERY_SECONDS", TARGET_SCENARIOS.sparseEverySeconds),
  sparseSeconds: num("BENCH_SPARSE_SECONDS", TARGET_SCENARIOS.sparseSeconds),
  settleTimeoutSeconds: num("BENCH_SETTLE_TIMEOUT_SECONDS", 90),
  rssSampleMs: num("BENCH_RSS_SAMPLE_MS", 100),
  targets: (process.env.BENCH_TARGETS ?? "direct,ours,peer").split(",").map((t) => t.trim()),
  // The services' own default and what npm start, compose and Kubernetes run: at info the edge writes
  // one access-log line per request, which an operator pays for (bench/README.md, "Why two gateway
  // benches disagreed").
  logLevel: process.env.LOG_LEVEL ?? "info",
  cpuProfiles: profiledProcesses(process.env.BENCH_CPU_PROFILE ?? ""),
};

export type BenchConfig = typeof config;
