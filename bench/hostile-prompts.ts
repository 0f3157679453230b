/**
 * Hostile prompts (docs/adr/0024-bounded-prompt-work.md).
 *
 *   npm run bench:tokenizer
 *
 * 1. The tokenizer's cost per byte on one run without breaks (the text that made BPE quadratic:
 *    80,000 characters took 2 s) at 10 KB, 1 MB and 10 MB, for a repeated run ("QUJD…", the
 *    attack that stalled every tenant) and random base64. Target: the three sizes within 2× of
 *    each other.
 * 2. A victim's latency (small chat requests, one at a time) while another account keeps three
 *    14 MB one-run prompts in flight, against the victim's quiet latency, on the whole system (each
 *    service its own process) with a 200,000-token model so the prompts pass the length bound and
 *    are tokenized. Target: p95 during the attack ≤ 3 × quiet p95 + 100 ms.
 *
 * BENCH_ATTACK_SECONDS (default 10) sets how long the attack lasts.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { eventNames } from "@mkt/runtime/nats";
import { countTextTokens } from "@mkt/runtime/tokens";
import { dropDatabase, freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { System } from "./gateway/system.ts";

const ATTACK_SECONDS = Number(process.env.BENCH_ATTACK_SECONDS ?? 10);
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const verdict = (ok: boolean) => (ok ? "PASS" : "MISSED");
const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
};

// 1. Cost per byte of one run. Each size counts fresh texts (random ones differ, so the
// tokenizer's merge cache cannot serve a repeat) until 10 MB have been counted, each made and
// flattened before its clock starts; the figure is their total time over their total bytes, so
// garbage collection weighs on every size alike.
console.log("tokenizer, one run without breaks (countTextTokens, no limit):");
const flat = (text: string) => Buffer.from(text, "latin1").toString("latin1");
const runs = {
  "QUJD repeated": (bytes: number) => flat("QUJD".repeat(bytes / 4)),
  "random base64": (bytes: number) => randomBytes((bytes * 3) / 4).toString("base64"),
};
countTextTokens(runs["QUJD repeated"](1_000_000)); // warm the tokenizer and the JIT
let tokenizerOk = true;
for (const [name, make] of Object.entries(runs)) {
  const perByte: number[] = [];
  const cells: string[] = [];
  for (const bytes of [10_000, 1_000_000, 10_000_000]) {
    let elapsedMs = 0;
    let counted = 0;
    for (; counted < 10_000_000; counted += bytes) {
      const text = make(bytes);
      const started = performance.now();
      countTextTokens(text);
      elapsedMs += performance.now() - started;
    }
    const ns = (elapsedMs * 1e6) / counted;
    perByte.push(ns);
    cells.push(`${bytes >= 1e6 ? `${bytes / 1e6} MB` : `${bytes / 1e3} KB`}: ${ns.toFixed(0)} ns/byte`);
  }
  const spread = Math.max(...perByte) / Math.min(...perByte);
  tokenizerOk &&= spread <= 2;
  console.log(
    `  ${name.padEnd(14)} ${cells.join(", ")}; max/min ${spread.toFixed(2)} (target ≤ 2) ${verdict(spread <= 2)}`,
  );
}
if (process.env.BENCH_ONLY_TOKENIZER) process.exit(tokenizerOk ? 0 : 1);

// 2. A victim during the attack, on the whole system.
const startedAt = new Date().toISOString().replace(/[:.]/g, "-");
const logDir = join(root, "logs", `bench-hostile-${startedAt}`);
mkdirSync(logDir, { recursive: true });
const databaseUrl = await freshDatabaseUrl();
const prefix = freshEventsPrefix();
const system = new System({
  root,
  logDir,
  databaseUrl,
  natsUrl: TEST_NATS_URL,
  eventsPrefix: prefix,
  model: "bench-model",
  contextWindow: 200_000,
  logLevel: "warn",
  onCrash: (what, tail) => {
    console.error(`\n✖ ${what}. Last lines of its log:\n${tail}`);
    process.exit(1);
  },
});
async function cleanUp() {
  await system.stop();
  const nc = await connect({ servers: TEST_NATS_URL });
  await (await jetstreamManager(nc)).streams.delete(eventNames(prefix).usageStream).catch(() => undefined);
  await nc.close();
  await dropDatabase(databaseUrl);
}

let exitCode = 0;
try {
  console.log(`\nsystem: starting (logs in ${logDir})`);
  await system.startModel({ completionTokens: 16, tokensPerSecond: 100_000 });
  await system.startServices();
  const [victim, attacker] = await system.createAccounts(2, 1_000);
  const chat = async (key: string, body: string) => {
    const res = await fetch(`${system.edgeUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body,
    });
    await res.arrayBuffer();
    return res.status;
  };
  const small = JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }] });
  const victimLatencies = async (until: () => boolean) => {
    const latencies: number[] = [];
    while (!until()) {
      const started = performance.now();
      const status = await chat(victim!.apiKey, small);
      if (status !== 200) throw new Error(`the victim's request answered ${status}`);
      latencies.push(performance.now() - started);
    }
    return latencies;
  };

  for (let i = 0; i < 20; i++) await chat(victim!.apiKey, small); // warm-up
  const quietEnd = performance.now() + 5_000;
  const quiet = await victimLatencies(() => performance.now() > quietEnd);

  // The attacker is another client: its own thread (a worker), so its 14 MB uploads do not
  // queue behind the victim's requests in one event loop, nor the victim's behind them.
  const attackEnd = performance.now() + ATTACK_SECONDS * 1_000;
  const attack = new Worker(
    `
    const { workerData, parentPort } = require("node:worker_threads");
    const body = Buffer.from(JSON.stringify({ model: "auto", messages: [{ role: "user", content: "QUJD".repeat(3_500_000) }] }));
    const until = Date.now() + workerData.ms;
    const statuses = {};
    const loop = async () => {
      while (Date.now() < until) {
        const res = await fetch(workerData.url, {
          method: "POST",
          headers: { authorization: "Bearer " + workerData.key, "content-type": "application/json" },
          body,
        });
        await res.arrayBuffer();
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      }
    };
    Promise.all([loop(), loop(), loop()]).then(() => parentPort.postMessage(statuses));
    `,
    {
      eval: true,
      workerData: { url: `${system.edgeUrl}/v1/chat/completions`, key: attacker!.apiKey, ms: ATTACK_SECONDS * 1_000 },
    },
  );
  const statuses = new Promise<Record<string, number>>((resolve, reject) => {
    attack.once("message", resolve);
    attack.once("error", reject);
  });
  const during = await victimLatencies(() => performance.now() > attackEnd);
  const refusals = new Map(Object.entries(await statuses).map(([status, n]) => [Number(status), n]));
  await attack.terminate();

  const quietP95 = percentile(quiet, 0.95);
  const target = 3 * quietP95 + 100;
  const duringP95 = percentile(during, 0.95);
  const fmt = (values: number[]) =>
    `p50 ${percentile(values, 0.5).toFixed(1)} ms, p95 ${percentile(values, 0.95).toFixed(1)} ms, max ${Math.max(...values).toFixed(1)} ms (${values.length} requests)`;
  console.log(`victim, quiet:          ${fmt(quiet)}`);
  console.log(`victim, during attack:  ${fmt(during)}`);
  console.log(
    `attacker's 14 MB prompts: ${[...refusals].map(([status, n]) => `${n} × ${status}`).join(", ")} in ${ATTACK_SECONDS} s`,
  );
  console.log(
    `victim p95 during the attack ${duringP95.toFixed(1)} ms, target ≤ 3 × ${quietP95.toFixed(1)} + 100 = ${target.toFixed(1)} ms ${verdict(duringP95 <= target)}`,
  );
  if (!tokenizerOk || duringP95 > target || [...refusals.keys()].some((status) => status < 400 || status >= 500))
    exitCode = 1;
} finally {
  await cleanUp();
}
process.exit(exitCode);
