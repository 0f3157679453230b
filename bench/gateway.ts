/**
 * Gateway benchmark: our system (edge → registry → upstream, with accounts and billing) against
 * the upstream called directly and against a peer gateway (Portkey's open-source gateway, pinned
 * in bench/peer), all on this machine, each target loaded alone.
 *
 *   npm run bench
 *   BENCH_TARGETS=direct,ours BENCH_STREAMS=200 npm run bench
 *
 * 0. A fresh database and NATS prefix; accounts, billing, registry and the edge as separate
 *    processes on free ports (logs in logs/bench-gateway-<time>/), the upstream is hoster-server's
 *    demo model; a `bench` tier without practical limits; BENCH_ACCOUNTS accounts signed up
 *    through POST /v1/accounts and topped up through the admin API. Every request takes the next
 *    account's key in turn, whatever its connection (load.ts, `key`).
 * 1. Added latency: 1 connection, non-streaming, short completion (p50/p90/p99/mean, "added" =
 *    target − direct).
 * 2. Throughput: 64 connections, non-streaming, short completion (requests/s, percentiles, errors).
 * 3. Streams: BENCH_STREAMS streams of 200 tokens at 50 tokens/s started at once (completed, TTFT,
 *    CPU per stream, peak RSS of each of our processes sampled from /proc every BENCH_RSS_SAMPLE_MS).
 * 4. Arrivals: the same streams started at a steady BENCH_ARRIVAL_RATE per second for
 *    BENCH_ARRIVAL_SECONDS, open loop (each on schedule whether or not earlier ones have finished):
 *    completed, TTFT, CPU per stream, how late the load generator started them.
 * 6. Sparse accounts (ours only, between 2 and 3, on short answers): BENCH_SPARSE_ACCOUNTS more
 *    accounts each sending one request every BENCH_SPARSE_EVERY_SECONDS for BENCH_SPARSE_SECONDS
 *    (bench/gateway/sparse.ts): how many GrantLease calls billing made, per account per minute.
 * 5. Correctness, after each scenario that loaded our system: every request it was sent compared
 *    with billing's usage records, leases, wallets and ledger (bench/gateway/verify.ts).
 * Each measured run follows an unmeasured warm-up (its requests to ours are still verified). The
 * figures go to bench/results/gateway-<time>.json. Exit status: non-zero only when a correctness
 * check fails (or the bench itself breaks); the performance targets (bench/gateway/targets.ts)
 * are printed as PASS/FAIL.
 *
 * Knobs (environment, default):
 *   BENCH_TARGETS                  direct,ours,peer  which targets to load
 *   BENCH_ACCOUNTS                 200     accounts (API keys) the load is spread over
 *   BENCH_MODEL                    demo-small
 *   BENCH_WARMUP_SECONDS           2       warm-up before each non-streaming run
 *   BENCH_LATENCY_SECONDS          10      scenario 1, per target
 *   BENCH_THROUGHPUT_SECONDS       20      scenario 2, per target
 *   BENCH_THROUGHPUT_CONNECTIONS   64      scenario 2
 *   BENCH_SHORT_TOKENS             16      completion length in scenarios 1–2 (no pacing)
 *   BENCH_STREAMS                  1000    scenario 3: concurrent streams (one connection each)
 *   BENCH_STREAM_WARMUP            20      streams run together before the measured ones (3–4)
 *   BENCH_STREAM_TOKENS            200     tokens per stream
 *   BENCH_STREAM_TOKENS_PER_SECOND 50      the upstream's pace in scenarios 3–4
 *   BENCH_STREAM_TIMEOUT_SECONDS   60      a stream not done by then counts as failed
 *   BENCH_ARRIVAL_RATE             100     scenario 4: new streams per second
 *   BENCH_ARRIVAL_SECONDS          10      scenario 4: how long they keep arriving (0: skip it)
 *   BENCH_STREAMS_PEER             1       also run scenarios 3–4 against the peer (0: skip)
 *   BENCH_STREAM_PRECONNECT        1       scenario 3: open the streams' connections before the measured
 *                                          run (0: each stream connects as it starts; see streams.ts)
 *   BENCH_SPARSE_ACCOUNTS          1000    scenario 6: accounts (made besides BENCH_ACCOUNTS)
 *   BENCH_SPARSE_EVERY_SECONDS     5       scenario 6: each account's interval between requests
 *   BENCH_SPARSE_SECONDS           60      scenario 6: how long each account sends (0: skip it)
 *   BENCH_SETTLE_TIMEOUT_SECONDS   90      how long scenario 5 waits for billing to settle
 *   BENCH_RSS_SAMPLE_MS            100     RSS sampling interval
 *   BENCH_TOPUP_USD                1000    credit added to each bench account
 *   BENCH_CPU_PROFILE              (none)  our processes to profile, e.g. edge,billing: each writes a V8
 *                                          <name>.cpuprofile into <logs>/profiles when it stops (open it in
 *                                          Chrome's DevTools; profiling slows the process)
 *   LOG_LEVEL                      info    the services' log level (info: what operators run, an access-log line
 *                                          per request in the edge's log)
 *   DATABASE_URL, NATS_URL                 where the fresh database and stream are made
 */
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Pool } from "undici";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { eventNames } from "@mkt/runtime/nats";
import { dropDatabase, freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { config } from "./gateway/config.ts";
import { databaseLine, watchDatabase } from "./gateway/database-writes.ts";
import {
  LOAD_GENERATOR,
  measureProcesses,
  perRequest,
  pidsNamed,
  served,
  type Counters,
  type ProcessGroups,
} from "./gateway/process-stats.ts";
import {
  chatBody,
  closedLoop,
  openPool,
  sendOne,
  type RequestRecord,
  type Target,
  type TargetName,
} from "./gateway/load.ts";
import { ensurePeerInstalled, startPeer, type Peer } from "./gateway/peer.ts";
import { printTable, verdictLine, writeResults, type LoadRun, type Results, type StreamRun } from "./gateway/report.ts";
import { sampleRss } from "./gateway/rss.ts";
import { stepsLine, watchSteps } from "./gateway/step-histograms.ts";
import { countByStatus, summarize } from "./gateway/stats.ts";
import { arrivalCount, preconnect, streamsArriving, streamsAtOnce } from "./gateway/streams.ts";
import { goals } from "./gateway/targets.ts";
import { freePort } from "@mkt/testkit/ports";
import { MODEL_PRICES, System, type Account } from "./gateway/system.ts";
import { Verifier } from "./gateway/verify.ts";
import { grantsCounted, sparseAccounts } from "./gateway/sparse.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const startedAt = new Date().toISOString();
const logDir = join(root, "logs", `bench-gateway-${startedAt.replace(/[:.]/g, "-")}`);
mkdirSync(logDir, { recursive: true });
const topUpUsd = Number(process.env.BENCH_TOPUP_USD ?? 1000);
const step = (message: string) =>
  console.log(`[${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${message}`);
const t0 = performance.now();
const wanted = (name: TargetName) => config.targets.includes(name);
const CHAT_PATH = "/v1/chat/completions";

const results: Results = {
  startedAt,
  settings: { ...config, topUpUsd, logDir },
  latency: {},
  throughput: {},
  streams: {},
  arrivals: {},
  verdicts: [],
  goals: [],
};
/** Every request sent to our system, warm-ups included: scenario 5 checks all of them. */
const oursSent: RequestRecord[] = [];

if (wanted("peer")) ensurePeerInstalled(root);
const databaseUrl = await freshDatabaseUrl();
const prefix = freshEventsPrefix();
step(`database ${new URL(databaseUrl).pathname.slice(1)}, events prefix ${prefix}, logs in ${logDir}`);

let crashed = false;
const system = new System({
  root,
  logDir,
  databaseUrl,
  natsUrl: TEST_NATS_URL,
  eventsPrefix: prefix,
  model: config.model,
  logLevel: config.logLevel,
  cpuProfiles: config.cpuProfiles,
  onCrash: (what, tail) => {
    crashed = true;
    console.error(`\n✖ ${what}. Last lines of its log:\n${tail}`);
    void cleanUp().then(() => process.exit(1));
  },
});
let peer: Peer | undefined;
let verifier: Verifier | undefined;
let cleaned: Promise<void> | undefined;

/** Stops every process the bench started, drops its database and deletes its stream (once). */
function cleanUp(): Promise<void> {
  cleaned ??= (async () => {
    step("cleaning up");
    await verifier?.close();
    await peer?.stop();
    await system.stop();
    const nc = await connect({ servers: TEST_NATS_URL });
    await (await jetstreamManager(nc)).streams.delete(eventNames(prefix).usageStream).catch(() => undefined);
    await nc.close();
    await dropDatabase(databaseUrl);
  })();
  return cleaned;
}
process.once("SIGINT", () => void cleanUp().then(() => process.exit(130)));

function targets(accounts: readonly Account[]): Record<TargetName, () => Target> {
  return {
    direct: () => ({
      name: "direct",
      origin: system.modelUrl,
      path: CHAT_PATH,
      healthPath: "/health",
      headers: () => ({ authorization: `Bearer ${system.modelToken}` }),
    }),
    ours: () => ({
      name: "ours",
      origin: system.edgeUrl,
      path: CHAT_PATH,
      healthPath: "/healthz",
      headers: (key) => ({ authorization: `Bearer ${accounts[key % accounts.length]!.apiKey}` }),
    }),
    peer: () => ({
      name: "peer",
      origin: peer!.url,
      path: CHAT_PATH,
      healthPath: "/",
      headers: () => ({
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": `${system.modelUrl}/v1`,
        authorization: `Bearer ${system.modelToken}`,
      }),
    }),
  };
}

/** The processes that serve each target's requests (the upstream is in all three). */
function processGroups(target: TargetName): ProcessGroups {
  const one = (pid: number | undefined) => () => (pid ? [pid] : []);
  const upstream = { upstream: one(system.modelPid()) };
  if (target === "direct") return upstream;
  if (target === "peer") return { peer: one(peer?.pid), ...upstream };
  const ours = Object.fromEntries(Object.entries(system.pids()).map(([name, pid]) => [name, one(pid)]));
  return { ...ours, postgres: () => pidsNamed("postgres"), nats: () => pidsNamed("nats-server"), ...upstream };
}

function loadRun(
  target: TargetName,
  connections: number,
  records: RequestRecord[],
  seconds: number,
  spent: Record<string, Counters>,
): LoadRun {
  const good = records.filter((r) => r.status === 200 && r.complete);
  return {
    target,
    connections,
    seconds,
    requests: records.length,
    rps: good.length / seconds,
    latency: summarize(good.map((r) => r.latencyMs)),
    errors: countByStatus(records.filter((r) => !(r.status === 200 && r.complete)).map((r) => r.status)),
    perRequest: perRequest(spent, records.length),
  };
}

/** "edge 0.48 ms 2.1 writes 1.9 sleeps, …; all 2.70 ms 11.2 writes 10.3 sleeps (load generator …)". */
function costLine(stats: Record<string, Counters>): string {
  const one = (c: Counters) => `${c.cpuMs.toFixed(2)} ms ${c.writes.toFixed(1)} writes ${c.sleeps.toFixed(1)} sleeps`;
  const parts = Object.entries(stats)
    .filter(([name]) => name !== LOAD_GENERATOR)
    .map(([name, c]) => `${name} ${one(c)}`);
  return `${parts.join(", ")}; all ${one(served(stats))} (${LOAD_GENERATOR} ${one(stats[LOAD_GENERATOR]!)})`;
}

/** Scenarios 1 and 2: a warm-up, then the measured closed loop, for each target in turn. */
async function closedLoopScenario(
  scenario: string,
  connections: number,
  seconds: number,
  make: Record<TargetName, () => Target>,
): Promise<Partial<Record<TargetName, LoadRun>>> {
  const runs: Partial<Record<TargetName, LoadRun>> = {};
  const body = chatBody(config.model, false);
  for (const name of ["direct", "ours", "peer"] as const) {
    if (!wanted(name)) continue;
    const target = make[name]();
    const pool = openPool(target, connections);
    try {
      const warm = await closedLoop(pool, target, {
        connections,
        durationMs: config.warmupSeconds * 1000,
        body,
        scenario,
        warmup: true,
      });
      // Every account warm before the measured run (one connection's 2 s reach only part of them):
      // requests rotate over the accounts, and each one's first waits on a grant, which measures
      // a cold start, not the steady state the target is about (the peer has none).
      for (let sent = warm.records.length; sent < config.accounts; sent++) {
        warm.records.push(await sendOne(pool, target, 0, body, scenario, true));
      }
      const steps = name === "ours" ? await watchSteps(system.metrics) : undefined;
      const writes = name === "ours" ? await watchDatabase(databaseUrl) : undefined;
      const usage = measureProcesses(processGroups(name));
      const run = await closedLoop(pool, target, {
        connections,
        durationMs: seconds * 1000,
        body,
        scenario,
        warmup: false,
      });
      const result = loadRun(name, connections, run.records, run.seconds, usage.stop());
      if (writes) result.database = await writes.stop(result.requests);
      if (steps) result.steps = await steps.finish();
      if (name === "ours") oursSent.push(...warm.records, ...run.records);
      runs[name] = result;
      const errors =
        Object.entries(result.errors)
          .map(([status, n]) => `${n}× ${status}`)
          .join(", ") || "none";
      step(
        `${scenario} ${name.padEnd(6)} ${result.requests} requests in ${run.seconds.toFixed(1)} s = ${result.rps.toFixed(1)}/s, ` +
          `p50 ${result.latency.p50.toFixed(2)} p99 ${result.latency.p99.toFixed(2)} mean ${result.latency.mean.toFixed(2)} ms, errors: ${errors}\n` +
          `           per request: ${costLine(result.perRequest)}` +
          (result.database ? `\n           billing's database: ${databaseLine(result.database)}` : "") +
          (result.steps ? `\n           in the services: ${stepsLine(result.steps)}` : ""),
      );
    } finally {
      await pool.close();
    }
  }
  return runs;
}

/** How a streaming scenario starts its measured streams. */
interface StreamLoad {
  scenario: "streams" | "arrivals";
  /** Streams that may be in flight at once: the pool's connections (one stream each). */
  connections: number;
  /** Open the connections before the measured run (streams.ts, `preconnect`). */
  preconnect: boolean;
  /** Sample our processes' resident sets into `results.rss`. */
  sampleRss: boolean;
  run(
    pool: Pool,
    target: Target,
    body: string,
    timeoutMs: number,
  ): Promise<{ records: RequestRecord[]; lagMs?: number[] }>;
}

/** Scenario 3: every stream started at once. */
const burst = (): StreamLoad => ({
  scenario: "streams",
  connections: config.streams,
  preconnect: config.streamPreconnect,
  sampleRss: true,
  run: async (pool, target, body, timeoutMs) => ({
    records: await streamsAtOnce(pool, target, {
      count: config.streams,
      body,
      scenario: "streams",
      warmup: false,
      timeoutMs,
    }),
  }),
});

/**
 * Scenario 4: streams arriving at a steady rate. Their connections are opened as they start (one
 * per 10 ms at 100/s, far from filling a listen backlog) and reused once earlier streams end, as
 * a client's pool would; the pool may hold one per stream so that a slow target never holds an
 * arrival back.
 */
const arrivals = (): StreamLoad => ({
  scenario: "arrivals",
  connections: arrivalCount(config.arrivalRate, config.arrivalSeconds),
  preconnect: false,
  sampleRss: false,
  run: (pool, target, body, timeoutMs) =>
    streamsArriving(pool, target, {
      ratePerSecond: config.arrivalRate,
      seconds: config.arrivalSeconds,
      body,
      scenario: "arrivals",
      timeoutMs,
    }),
});

/** Scenarios 3 and 4: a warm-up of streams at once, then the measured streams, for each target in turn. */
async function streamScenario(
  load: StreamLoad,
  make: Record<TargetName, () => Target>,
): Promise<Partial<Record<TargetName, StreamRun>>> {
  const { scenario } = load;
  const runs: Partial<Record<TargetName, StreamRun>> = {};
  const body = chatBody(config.model, true);
  const timeoutMs = config.streamTimeoutSeconds * 1000;
  for (const name of ["direct", "ours", "peer"] as const) {
    if (!wanted(name) || (name === "peer" && !config.streamsPeer)) continue;
    const target = make[name]();
    const pool = openPool(target, Math.max(load.connections, config.streamWarmup));
    try {
      const warm = await streamsAtOnce(pool, target, {
        count: config.streamWarmup,
        body,
        scenario,
        warmup: true,
        timeoutMs,
      });
      if (load.preconnect) await preconnect(pool, target, load.connections);
      const steps = name === "ours" ? await watchSteps(system.metrics) : undefined;
      const sampler = name === "ours" && load.sampleRss ? sampleRss(system.pids(), config.rssSampleMs) : undefined;
      const usage = measureProcesses(processGroups(name));
      const started = performance.now();
      const { records, lagMs } = await load.run(pool, target, body, timeoutMs);
      const seconds = (performance.now() - started) / 1000;
      const spent = usage.stop();
      if (sampler) results.rss = sampler.stop();
      if (name === "ours") oursSent.push(...warm, ...records);
      const done = records.filter((r) => r.status === 200 && r.complete);
      const run: StreamRun = {
        target: name,
        streams: records.length,
        completed: done.length,
        ttft: summarize(done.map((r) => r.ttftMs ?? NaN)),
        total: summarize(done.map((r) => r.latencyMs)),
        errors: countByStatus(records.filter((r) => !(r.status === 200 && r.complete)).map((r) => r.status)),
        perStream: perRequest(spent, records.length),
        steps: await steps?.finish(),
        arrivalLag: lagMs && summarize(lagMs),
      };
      runs[name] = run;
      const rss = sampler && results.rss ? `, peak RSS sum ${results.rss.sumOfPeaksMb.toFixed(0)} MB` : "";
      const lag = run.arrivalLag
        ? `, started late by p99 ${run.arrivalLag.p99.toFixed(1)} max ${run.arrivalLag.max.toFixed(1)} ms`
        : "";
      const firstError = records.find((r) => r.error)?.error;
      step(
        `${scenario} ${name.padEnd(6)} ${run.completed}/${run.streams} complete in ${seconds.toFixed(1)} s, TTFT p50 ` +
          `${run.ttft.p50.toFixed(1)} p99 ${run.ttft.p99.toFixed(1)} ms${rss}${lag}` +
          (firstError ? ` (first error: ${firstError})` : "") +
          `\n           per stream: ${costLine(run.perStream)}` +
          (run.steps ? `\n           in the services: ${stepsLine(run.steps)}` : ""),
      );
    } finally {
      await pool.close();
    }
  }
  return runs;
}

/** Scenario 6: sparse accounts on ours, each on its own key (`key` = its index in `accounts`). */
async function sparseScenario(accounts: readonly Account[]): Promise<void> {
  const target = targets(accounts).ours();
  const pool = openPool(target, 128);
  try {
    const before = await grantsCounted(system.billingMetricsUrl);
    const steps = await watchSteps(system.metrics);
    const usage = measureProcesses(processGroups("ours"));
    const started = performance.now();
    const records = await sparseAccounts(pool, target, {
      accounts: accounts.length,
      everyMs: config.sparseEverySeconds * 1000,
      durationMs: config.sparseSeconds * 1000,
      body: chatBody(config.model, false),
      scenario: "sparse",
    });
    const spent = usage.stop();
    const grants = (await grantsCounted(system.billingMetricsUrl)) - before;
    const inServices = await steps.finish();
    oursSent.push(...records);
    const done = records.filter((r) => r.status === 200 && r.complete);
    // Each account sends one request per interval: an interval of traffic for each request.
    const minutes = (Math.round(config.sparseSeconds / config.sparseEverySeconds) * config.sparseEverySeconds) / 60;
    results.sparse = {
      accounts: accounts.length,
      everySeconds: config.sparseEverySeconds,
      seconds: config.sparseSeconds,
      requests: records.length,
      completed: done.length,
      latency: summarize(done.map((r) => r.latencyMs)),
      grants,
      grantsPerAccountPerMinute: grants / accounts.length / minutes,
    };
    step(
      `sparse ours   ${done.length}/${records.length} complete in ${((performance.now() - started) / 1000).toFixed(1)} s, ` +
        `latency p50 ${results.sparse.latency.p50.toFixed(2)} p99 ${results.sparse.latency.p99.toFixed(2)} ms; ` +
        `${grants} GrantLease calls: ${results.sparse.grantsPerAccountPerMinute.toFixed(2)} per account per minute` +
        `\n           per request: ${costLine(perRequest(spent, records.length))}` +
        `\n           in the services: ${stepsLine(inServices)}`,
    );
  } finally {
    await pool.close();
  }
}

async function verifyOurs(scenario: string): Promise<void> {
  if (!verifier) return;
  step(`checking ${oursSent.length} requests sent to ours against billing (scenario 5 after ${scenario})`);
  const verdict = await verifier.verify(scenario, oursSent, config.settleTimeoutSeconds * 1000);
  results.verdicts.push(verdict);
  step(`${verdict.ok ? "PASS" : "FAIL"} ${verdictLine(verdict)}`);
}

let exitCode = 0;
try {
  // Scenarios 1–2 want a short answer at once.
  await system.startModel({ completionTokens: config.shortTokens, tokensPerSecond: 0 });
  step(`upstream (hoster-server demo model) at ${system.modelUrl}: ${config.shortTokens} tokens, no pacing`);
  await system.startServices();
  step(`our system is ready at ${system.edgeUrl}`);
  const accounts = await system.createAccounts(config.accounts, topUpUsd);
  step(`${accounts.length} accounts signed up and topped up with $${topUpUsd} each`);
  const sparse = wanted("ours") && config.sparseSeconds > 0;
  const sparseOnes = sparse ? await system.createAccounts(config.sparseAccounts, topUpUsd) : [];
  if (sparse) step(`${sparseOnes.length} more accounts for scenario 6 (sparse accounts)`);
  if (wanted("ours")) {
    const accountOf = (r: RequestRecord) =>
      r.scenario === "sparse" ? sparseOnes[r.key]! : accounts[r.key % accounts.length]!;
    verifier = new Verifier(databaseUrl, [...accounts, ...sparseOnes], accountOf, config.model, MODEL_PRICES);
    await verifier.connect();
  }
  if (wanted("peer")) {
    peer = await startPeer(root, await freePort(), logDir);
    step(`peer (Portkey gateway) at ${peer.url}`);
  }
  const make = targets(accounts);

  step(`scenario 1: added latency, 1 connection, ${config.latencySeconds} s per target`);
  results.latency = await closedLoopScenario("latency", 1, config.latencySeconds, make);
  if (wanted("ours")) await verifyOurs("latency");

  step(`scenario 2: throughput, ${config.throughputConnections} connections, ${config.throughputSeconds} s per target`);
  results.throughput = await closedLoopScenario(
    "throughput",
    config.throughputConnections,
    config.throughputSeconds,
    make,
  );
  if (wanted("ours")) await verifyOurs("throughput");

  if (sparse) {
    step(
      `scenario 6: sparse accounts, ${sparseOnes.length} each sending one request every ${config.sparseEverySeconds} s ` +
        `for ${config.sparseSeconds} s (ours only)`,
    );
    await sparseScenario(sparseOnes);
    await verifyOurs("sparse");
  }

  // Scenarios 3–4 restart the upstream on the same port with a paced, longer answer (system.ts).
  await system.startModel({ completionTokens: config.streamTokens, tokensPerSecond: config.streamTokensPerSecond });
  step(
    `scenario 3: ${config.streams} streams at once, ${config.streamTokens} tokens at ${config.streamTokensPerSecond} tokens/s ` +
      `(upstream restarted with that pace)`,
  );
  results.streams = await streamScenario(burst(), make);
  if (wanted("ours")) await verifyOurs("streams");

  if (arrivalCount(config.arrivalRate, config.arrivalSeconds) > 0) {
    step(
      `scenario 4: ${config.arrivalRate} new streams per second for ${config.arrivalSeconds} s, ` +
        `${config.streamTokens} tokens at ${config.streamTokensPerSecond} tokens/s`,
    );
    results.arrivals = await streamScenario(arrivals(), make);
    if (wanted("ours")) await verifyOurs("arrivals");
  }

  results.goals = goals(results, config);
  printTable(results);
  if (results.verdicts.some((v) => !v.ok)) exitCode = 1;
} catch (err) {
  console.error(`\n✖ the benchmark failed: ${(err as Error).stack ?? String(err)}`);
  exitCode = 1;
} finally {
  if (!crashed) {
    const path = writeResults(root, results);
    console.log(`\nFigures written to ${path}`);
    await cleanUp();
  }
}
process.exit(exitCode);
