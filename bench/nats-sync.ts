/**
 * What syncing every write costs the usage stream (`sync_interval: always`, docs/deploy.md).
 *
 *   npm run bench:nats-sync
 *
 * Starts a nats-server of its own (NATS_SERVER_BIN, else the one on PATH or in sbin) with a
 * file-stored stream shaped as the usage stream (R1), once as JetStream syncs by default (every
 * two minutes) and once syncing every write, and publishes BENCH_MESSAGES (2,000) usage-sized
 * messages (a UsageCompleted as an edge encodes it) with acks: one at a time (a lone answer's
 * event) and BENCH_IN_FLIGHT (32) at a time (the edge's group commit under load). Prints acked
 * messages a second and the median and p99 ack time of each. A server older than 2.10 does not know
 * the setting: then it measures without only, and the cost of one fsync of that size on the
 * store's disk (what syncing adds to each write) stands in for the other.
 */
import { randomUUID } from "node:crypto";
import { closeSync, fsyncSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { jetstream, jetstreamManager, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { newRequestId } from "@mkt/runtime/ids";
import { renderNatsJetStreamBlock } from "@mkt/runtime/nats-server-config";
import { answers, findNatsServer, natsServerSyncsEveryWrite, natsServerVersion } from "@mkt/testkit/local-servers";
import { freePort } from "@mkt/testkit/ports";
import { UsageCompleted } from "@mkt/proto/events/v1/events";

const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 2_000);
const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT ?? 32);

/** An event as an edge publishes it for a streamed chat answer. */
const event = UsageCompleted.encode(
  UsageCompleted.fromPartial({
    requestId: newRequestId(),
    accountId: randomUUID(),
    keyId: randomUUID(),
    leaseId: randomUUID(),
    provider: "hoster",
    hosterId: randomUUID(),
    modelId: "demo/open-8b",
    inputTokens: 1_234n,
    outputTokens: 321n,
    latencyMs: 842n,
    success: true,
    startedAt: new Date().toISOString(),
    inputPricePer1mMicros: 50_000n,
    outputPricePer1mMicros: 150_000n,
    worstCaseMicros: 1_000_000n,
    worstCaseTokens: 9_000n,
    timeToFirstTokenMs: 120n,
    finishReason: "stop",
    upstreamStatus: 200,
    cachedInputTokens: 1_024n,
    cachedInputPricePer1mMicros: 5_000n,
  }),
).finish();

interface Figures {
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;

async function publishAll(url: string, inFlight: number): Promise<Figures> {
  const nc = await connect({ servers: url });
  try {
    const js = jetstream(nc);
    const times: number[] = [];
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < MESSAGES) {
          const i = next++;
          const at = performance.now();
          await js.publish("bench.usage.completed", event, { msgID: `m${inFlight}-${i}` });
          times.push(performance.now() - at);
        }
      }),
    );
    const seconds = (performance.now() - started) / 1_000;
    times.sort((a, b) => a - b);
    return { perSecond: MESSAGES / seconds, p50Ms: percentile(times, 0.5), p99Ms: percentile(times, 0.99) };
  } finally {
    await nc.close();
  }
}

async function withServer<T>(binary: string, syncEveryWrite: boolean, run: (url: string) => Promise<T>): Promise<T> {
  const home = mkdtempSync(join(tmpdir(), "bench-nats-sync-"));
  const configPath = join(home, "nats-server.conf");
  writeFileSync(configPath, renderNatsJetStreamBlock({ storeDir: join(home, "store"), syncEveryWrite }));
  const port = await freePort();
  const server = spawn(binary, ["-c", configPath, "-a", "127.0.0.1", "-p", String(port)], { stdio: "ignore" });
  try {
    while (!(await answers("127.0.0.1", port))) await new Promise((resolve) => setTimeout(resolve, 50));
    const url = `nats://127.0.0.1:${port}`;
    const nc = await connect({ servers: url });
    const jsm = await jetstreamManager(nc);
    // The usage stream's settings (packages/runtime/src/nats.ts), on a subject of its own.
    await jsm.streams.add({
      name: "BENCH_USAGE",
      subjects: ["bench.usage.completed"],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: 1,
      duplicate_window: 2 * 60 * 1_000_000_000,
    });
    await nc.close();
    return await run(url);
  } finally {
    server.kill("SIGKILL");
    rmSync(home, { recursive: true, force: true });
  }
}

/** Microseconds one write of `bytes` followed by fsync takes on the disk under `dir`. */
function fsyncMicros(dir: string, bytes: number, rounds = 500): number {
  const path = join(dir, "fsync-probe");
  const fd = openSync(path, "w");
  const chunk = Buffer.alloc(bytes, 1);
  const times: number[] = [];
  try {
    for (let i = 0; i < rounds; i++) {
      const at = performance.now();
      writeSync(fd, chunk);
      fsyncSync(fd);
      times.push((performance.now() - at) * 1_000);
    }
  } finally {
    closeSync(fd);
    rmSync(path);
  }
  times.sort((a, b) => a - b);
  return percentile(times, 0.5);
}

const binary = process.env.NATS_SERVER_BIN ?? findNatsServer();
if (!binary) throw new Error("nats-server is not installed (apt-get install nats-server), or set NATS_SERVER_BIN");
const version = natsServerVersion(binary) ?? "unknown";
const canSync = natsServerSyncsEveryWrite(binary);
console.log(
  `nats-server ${version} (${binary}); ${MESSAGES} messages of ${event.length} bytes, acked; ` +
    `one at a time, and ${IN_FLIGHT} in flight`,
);
const row = (label: string, f: Figures) =>
  console.log(
    `${label.padEnd(34)} ${f.perSecond.toFixed(0).padStart(7)} msg/s   ack p50 ${f.p50Ms.toFixed(2)} ms   p99 ${f.p99Ms.toFixed(2)} ms`,
  );
const modes = canSync ? [false, true] : [false];
for (const syncEveryWrite of modes) {
  const label = syncEveryWrite ? "sync_interval: always" : "default sync (every 2 min)";
  const [one, many] = await withServer(binary, syncEveryWrite, async (url) => {
    await publishAll(url, IN_FLIGHT); // warm-up
    return [await publishAll(url, 1), await publishAll(url, IN_FLIGHT)];
  });
  row(`${label}, 1 in flight`, one!);
  row(`${label}, ${IN_FLIGHT} in flight`, many!);
}
const probeDir = mkdtempSync(join(tmpdir(), "bench-fsync-"));
const fsync = fsyncMicros(probeDir, event.length + 64);
rmSync(probeDir, { recursive: true, force: true });
console.log(`one ${event.length + 64}-byte write + fsync on ${tmpdir()}'s disk: p50 ${fsync.toFixed(0)} µs`);
if (!canSync) {
  console.log(
    `this nats-server cannot sync every write (2.10+ can): a stream syncing ` +
      `every write stores at most ~${Math.floor(1_000_000 / fsync)} messages a second here, if each costs one fsync`,
  );
}
