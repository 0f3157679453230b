/**
 * What a busy edge's heartbeats cost PostgreSQL: row versions written per reported lease per
 * beat (and how many of them were HOT, touching no index), CPU time, and how long a grant on one
 * of those accounts waits meanwhile (heartbeats hold the wallets of the accounts they apply).
 *
 *   npx node bench/heartbeats.ts                         # 200 accounts, 60 beats
 *   BENCH_ACCOUNTS=256 BENCH_BEATS=100 npx node bench/heartbeats.ts
 *
 * One edge holds a lease on every account and reports each of them in every heartbeat, each
 * lease having admitted one more request (and its worst case of credit) since the last, with a
 * demand of one request per second: every beat applies the admitted totals, grows the credit,
 * minute and day rooms and counts the grown room, the heaviest beat a lease makes. The run
 * then beats again while another edge asks for grants on the same accounts one after another, to
 * time how long those wait for the heartbeat's wallet locks (BENCH_GRANTS=0: not run).
 * Row counts come from pg_stat_user_tables of the run's own database, read after billing's
 * connections have closed (a backend reports its counts when it exits), so other databases on a
 * shared server do not count; pg_stat_statements needs shared_preload_libraries, which a shared
 * development server does not have.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { createLogger } from "@mkt/runtime/logger";
import { dropDatabase, freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { LeaseResource, type LeaseReport, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { loadBillingConfig } from "../services/billing/src/config.ts";
import { startBilling } from "../services/billing/src/server.ts";
import { LOAD_GENERATOR, measureProcesses, pidsNamed } from "./gateway/process-stats.ts";

const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 200);
const BEATS = Number(process.env.BENCH_BEATS ?? 60);
const GRANTS = process.env.BENCH_GRANTS !== "0";
const WORST_CASE = 500n; // micro-USD per request
const TABLES = ["leases", "lease_allowances", "wallets", "rate_counters", "edge_sessions"];
const POSTGRES = "postgres";
/** What the edge reported admitted on each allowance so far. */
const reportedAdmitted = new Map<string, bigint>();

const log = createLogger("bench", process.env.LOG_LEVEL ?? "warn");
const databaseUrl = await freshDatabaseUrl();
const certs = await testCertificates();
// The longest TTL: billing restarts between the grants and the beats, and the session must not
// lapse meanwhile. A wide tier, so no limit refuses the run's growth.
const config = loadBillingConfig({
  ...certs.env("billing"),
  TIERS: JSON.stringify({ free: { limit_per_minute: 100_000_000, limit_per_day: 1_000_000_000 } }),
  LEASE_TTL_MS: "60000",
  EDGE_ISOLATION_MS: "120000",
  DATABASE_URL: databaseUrl,
  NATS_URL: TEST_NATS_URL,
  EVENTS_PREFIX: freshEventsPrefix(),
  GRPC_PORT: "0",
  METRICS_PORT: "0",
  SECRETS_KEY: randomBytes(32).toString("hex"),
});
const options = { leaseCloserIntervalMs: 3_600_000 };
const need = (credit: bigint, requests: bigint) => ({
  creditMicros: credit,
  requests,
  tokens: 0n,
  subscriptionId: "",
  keyId: "",
});
const edges = [0, 1].map(() => ({ edgeId: `edge_${randomUUID()}`, bootId: randomUUID(), incarnation: 0n, seq: 0n }));
const call = (edge: (typeof edges)[number]) => ({
  edgeId: edge.edgeId,
  bootId: edge.bootId,
  incarnation: edge.incarnation,
  sequence: ++edge.seq,
});

const db = new pg.Client({ connectionString: databaseUrl, options: "-c search_path=billing" });
try {
  // 1. Each account gets a lease on both edges; billing stops so its backends report their counts.
  const billing = await startBilling(config, log, options);
  const raw = createClient(BillingServiceClient, `127.0.0.1:${billing.port}`, certs.tls("edge"));
  const client = promiseClient(raw);
  const accounts = Array.from({ length: ACCOUNTS }, () => randomUUID());
  const leases = new Map<string, LeaseState>();
  for (const accountId of accounts) {
    for (const [i, edge] of edges.entries()) {
      const reply = await client.grantLease({
        ...call(edge),
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: need(WORST_CASE, 1n),
      });
      edge.incarnation = reply.incarnation;
      if (i === 0) leases.set(reply.lease!.leaseId, reply.lease!);
    }
  }
  raw.close();
  await billing.close();
  await db.connect();
  const before = await tableCounts(db);

  // 2. The beats alone: rows written and CPU.
  const beats = await runBeats(false);
  const after = await tableCounts(db);
  const reported = ACCOUNTS * (BEATS + 1); // the warm-up beat's rows are counted too
  console.log(`${ACCOUNTS} leases reported in each of ${BEATS + 1} heartbeats`);
  console.log("table              updates/lease/beat   HOT updates/lease/beat   inserts/lease/beat");
  for (const table of TABLES) {
    const [b, a] = [before.get(table)!, after.get(table)!];
    const per = (k: keyof Counts) => ((a[k] - b[k]) / reported).toFixed(2).padStart(8);
    console.log(`${table.padEnd(18)} ${per("upd")}${" ".repeat(14)}${per("hot")}${" ".repeat(16)}${per("ins")}`);
  }
  const perLease = (cpuMs: number) => ((cpuMs * 1000) / (ACCOUNTS * BEATS)).toFixed(1);
  console.log(
    `CPU per reported lease: billing ${perLease(beats.spent[LOAD_GENERATOR]!.cpuMs)} µs, ` +
      `PostgreSQL ${perLease(beats.spent[POSTGRES]!.cpuMs)} µs (this database's backends)`,
  );
  console.log(`heartbeat ms: ${summary(beats.beatMs)}`);

  // 3. The same beats with grants on their accounts from the other edge meanwhile.
  if (GRANTS) {
    const contended = await runBeats(true);
    console.log(`with grants from another edge: heartbeat ms ${summary(contended.beatMs)}`);
    console.log(`grant ms while heartbeats run: ${summary(contended.grantMs)}`);
  }

  /** BEATS + 1 heartbeats of every lease on a billing started for them (and stopped after). */
  async function runBeats(withGrants: boolean) {
    const billing = await startBilling(config, log, options);
    const raw = createClient(BillingServiceClient, `127.0.0.1:${billing.port}`, certs.tls("edge"));
    const client = promiseClient(raw);
    const [beating, granting] = edges as [(typeof edges)[number], (typeof edges)[number]];
    const beatMs: number[] = [];
    const grantMs: number[] = [];
    let done = false;
    const grants = (async () => {
      for (let n = 0; withGrants && !done; n++) {
        const t = performance.now();
        await client.grantLease({
          ...call(granting),
          accountId: accounts[n % ACCOUNTS]!,
          tier: "free",
          minCreditMicros: 0n,
          request: need(WORST_CASE, 1n),
        });
        grantMs.push(performance.now() - t);
      }
    })();
    let cpu: ReturnType<typeof measureProcesses> | undefined;
    for (let beat = 0; beat <= BEATS; beat++) {
      // The first beat warms billing's pool up; the measure starts after it.
      if (beat === 1) cpu = measureProcesses({ [POSTGRES]: () => backendsOf(databaseUrl) });
      const t = performance.now();
      const reply = await client.heartbeat({
        ...call(beating),
        leases: [...leases.values()].map(admitOne),
        unansweredGrantAccounts: [],
      });
      if (beat > 0) beatMs.push(performance.now() - t);
      for (const state of reply.leases) leases.set(state.leaseId, state);
    }
    const spent = cpu!.stop();
    done = true;
    await grants;
    raw.close();
    await billing.close();
    return { spent, beatMs, grantMs };
  }
} finally {
  await db.end().catch(() => undefined);
  await dropDatabase(databaseUrl);
}

/** The lease's report with one more request admitted on each room it has (as far as granted). */
function admitOne(lease: LeaseState): LeaseReport {
  const rooms = [lease.credit!, ...lease.rooms.filter((r) => r.startsInMs === 0n)];
  const admitted = rooms.map((room) => {
    const step = room.resource === LeaseResource.LEASE_RESOURCE_UNSPECIFIED ? WORST_CASE : 1n;
    const next = (reportedAdmitted.get(room.allowanceId) ?? 0n) + step;
    const capped = next > room.granted ? room.granted : next;
    reportedAdmitted.set(room.allowanceId, capped);
    return { allowanceId: room.allowanceId, admitted: capped };
  });
  return {
    leaseId: lease.leaseId,
    admitted,
    final: false,
    demandPerSecond: need(WORST_CASE, 1n),
    budgetDemand: [],
    slotsPinned: true,
    nextWindow: false,
  };
}

interface Counts {
  upd: number;
  hot: number;
  ins: number;
}

/**
 * The tables' counts once billing's backends have reported theirs: each reports when it exits,
 * shortly after billing closed its pool, so the counts are read until they stop moving.
 */
async function tableCounts(client: pg.Client): Promise<Map<string, Counts>> {
  let last = "";
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 300));
    const counts = await readCounts(client);
    const now = JSON.stringify([...counts]);
    if (now === last) return counts;
    last = now;
  }
}

async function readCounts(client: pg.Client): Promise<Map<string, Counts>> {
  // Counts are cached per transaction; a fresh snapshot sees what the closed backends reported.
  await client.query(`select pg_stat_clear_snapshot()`);
  const { rows } = await client.query<{ relname: string; upd: string; hot: string; ins: string }>(
    `select relname, n_tup_upd as upd, n_tup_hot_upd as hot, n_tup_ins as ins from pg_stat_user_tables
     where schemaname = 'billing' and relname = any($1)`,
    [TABLES],
  );
  return new Map(rows.map((r) => [r.relname, { upd: Number(r.upd), hot: Number(r.hot), ins: Number(r.ins) }]));
}

function summary(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0).toFixed(1);
  return `p50 ${at(0.5)}, p99 ${at(0.99)}, max ${at(1)} (${values.length})`;
}

/** The PostgreSQL backends serving `url`'s database (their command line names it). */
function backendsOf(url: string): number[] {
  const database = new URL(url).pathname.slice(1);
  return pidsNamed("postgres").filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split(" ").includes(database);
    } catch {
      return false; // exited while we looked
    }
  });
}
