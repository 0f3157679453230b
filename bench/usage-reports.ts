/**
 * Usage reports over a heavy account: 1,000,000 usage records spread over 365 days, read through
 * the real system (edge → billing over gRPC → Postgres), each service its own process.
 *
 *   npm run bench:usage                       # 1,000,000 records
 *   BENCH_ROWS=200000 npm run bench:usage
 *
 * Prints p50/p95 of GET /v1/usage/tokens?days=365&interval=day and /v1/usage/breakdown?days=365
 * (targets: p50 ≤ 50 ms), the rows/s of GET /v1/usage/export?days=365 (target ≥ 100,000) and the
 * edge's peak RSS (VmHWM, target < 300 MB). The records and their hourly rollups are seeded with
 * SQL (generate_series, then one INSERT…SELECT for the rollups, as settlement would have left
 * them): settling a million events would measure settlement, which bench/settlement.ts covers.
 * The database and the NATS stream are the bench's own and are removed at the end.
 */
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { randomToken } from "@mkt/runtime/ids";
import { eventNames } from "@mkt/runtime/nats";
import { dropDatabase, freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { freePort } from "@mkt/testkit/ports";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { statusField } from "./gateway/process-stats.ts";
import { startProcesses, waitForHttp } from "../scripts/lib/processes.ts";

const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 50);
const TARGETS = { p50Ms: 50, exportRowsPerSecond: 100_000, edgePeakRssMb: 300 };

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const databaseUrl = await freshDatabaseUrl();
const prefix = freshEventsPrefix();

/** Peak and current resident set of a process, in MB (Linux /proc). */
function memoryOf(pid: number): { peakMb: number; rssMb: number } {
  return { peakMb: statusField(pid, "VmHWM") / 1024, rssMb: statusField(pid, "VmRSS") / 1024 };
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
const verdict = (ok: boolean) => (ok ? "ok" : "MISSED");

const [accountsPort, accountsMetricsPort, billingPort, billingMetricsPort, registryPort, edgePort] = await Promise.all([
  freePort(),
  freePort(),
  freePort(),
  freePort(),
  freePort(),
  freePort(),
]);
const common = { DATABASE_URL: databaseUrl, NATS_URL: TEST_NATS_URL, EVENTS_PREFIX: prefix, LOG_LEVEL: "warn" };
// mTLS between the services, as in production (a CA of the bench's own, in a temporary folder).
const certs = await testCertificates();
const supervisor = startProcesses(
  root,
  [
    {
      name: "accounts",
      entry: "services/accounts/src/main.ts",
      env: {
        ...common,
        ...certs.env("accounts"),
        GRPC_PORT: String(accountsPort),
        METRICS_PORT: String(accountsMetricsPort),
      },
    },
    {
      name: "billing",
      entry: "services/billing/src/main.ts",
      env: {
        ...common,
        ...certs.env("billing"),
        GRPC_PORT: String(billingPort),
        METRICS_PORT: String(billingMetricsPort),
        // Subscriptions need these; the usage reports never call them.
        ACCOUNTS_ADDR: `127.0.0.1:${accountsPort}`,
        REGISTRY_ADDR: `127.0.0.1:${registryPort}`,
        SECRETS_KEY: randomBytes(32).toString("hex"),
      },
    },
    {
      name: "edge",
      entry: "edge/src/main.ts",
      env: {
        ...common,
        ...certs.env("edge"),
        HOST: "127.0.0.1",
        PORT: String(edgePort),
        ACCOUNTS_ADDR: `127.0.0.1:${accountsPort}`,
        BILLING_ADDR: `127.0.0.1:${billingPort}`,
        // No registry: the usage reports never call it (nothing listens on this port).
        REGISTRY_ADDR: `127.0.0.1:${registryPort}`,
        ADMIN_TOKEN: randomToken(24),
      },
    },
  ],
  (what, tail) => {
    console.error(`\n✖ ${what}. Last lines of its log:\n${tail}`);
    process.exitCode = 1;
  },
);
const base = `http://127.0.0.1:${edgePort}`;
const db = new pg.Client({ connectionString: databaseUrl, options: "-c search_path=billing" });

try {
  if (!(await waitForHttp(`${base}/healthz`, 60_000))) throw new Error("the edge did not start; see logs/edge.log");
  let signUp: Response | undefined;
  for (let attempt = 0; attempt < 120 && signUp?.status !== 201; attempt++) {
    if (attempt > 0) await new Promise((r) => setTimeout(r, 250));
    signUp = await fetch(`${base}/v1/accounts`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: `bench-${randomToken(6)}@example.com`, password: "bench password 123" }),
    });
  }
  if (signUp?.status !== 201) throw new Error(`sign-up failed: ${signUp?.status} ${await signUp?.text()}`);
  const { api_key: apiKey, account_id: accountId } = (await signUp.json()) as { api_key: string; account_id: string };
  const auth = { authorization: `Bearer ${apiKey}` };

  await db.connect();
  // Billing migrates its schema when it starts, which sign-up does not wait for.
  for (let waited = 0; ; waited += 250) {
    const { rows } = await db.query(`select to_regclass('billing.usage_hourly') is not null as ready`);
    if (rows[0].ready) break;
    if (waited > 60_000) throw new Error("billing did not create its tables; see logs/billing.log");
    await new Promise((r) => setTimeout(r, 250));
  }
  let t = performance.now();
  // Four routes (two hoster models, one local, one cloud), about 3% failed requests, one record
  // every 365 days / ROWS, the newest now. Costs follow
  // docs/adr/0002-money-as-integer-micro-usd.md: ceil(tokens × price / 1M), hoster fee floor(20%)
  // per record.
  await db.query(
    `insert into usage_records (request_id, account_id, key_id, model_id, provider, hoster_id,
       input_tokens, output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms, success,
       error_code, created_at)
     select 'bench_' || g, $1, 'key_bench', r.model_id, r.provider, r.hoster_id, u.input_tokens,
       u.output_tokens, c.cost, case when r.provider = 'hoster' then c.cost * 20 / 100 else c.cost end,
       case when r.provider = 'hoster' then c.cost - c.cost * 20 / 100 else 0 end,
       200 + (g * 7919) % 3000, g % 37 <> 0, case when g % 37 = 0 then 'upstream_error' else '' end,
       now() - make_interval(secs => g * (365 * 86400.0 / $2))
     from generate_series(1, $2::bigint) as g
     cross join lateral (select (array['demo-small', 'gpt-cloud', 'llama-3-8b.gguf', 'mistral-7b.gguf'])[1 + g % 4] as model_id,
       (array['local', 'cloud', 'hoster', 'hoster'])[1 + g % 4] as provider,
       (array['', '', 'hst_bench_1', 'hst_bench_2'])[1 + g % 4] as hoster_id) as r
     cross join lateral (select 20 + (g * 104729) % 2000 as input_tokens,
       case when g % 37 = 0 then 0 else (g * 15485863) % 800 end as output_tokens) as u
     cross join lateral (select (u.input_tokens * 500000 + u.output_tokens * 1500000 + 999999) / 1000000 as cost) as c`,
    [accountId, ROWS],
  );
  const seeded = performance.now() - t;
  t = performance.now();
  await db.query(
    `insert into usage_hourly (account_id, hour, model_id, provider, requests, input_tokens, output_tokens,
       cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms_sum, failed)
     select account_id, date_trunc('hour', created_at, 'UTC'), model_id, provider, count(*), sum(input_tokens),
       sum(output_tokens), sum(cost_micros), sum(platform_fee_micros), sum(hoster_earned_micros), sum(latency_ms),
       count(*) filter (where not success)
     from usage_records where account_id = $1 group by 1, 2, 3, 4`,
    [accountId],
  );
  const rolled = performance.now() - t;
  await db.query(`vacuum analyze usage_records`);
  await db.query(`vacuum analyze usage_hourly`);
  const [rollups] = (await db.query(`select count(*)::int as n from usage_hourly`)).rows as Array<{ n: number }>;
  console.log(
    `seeded ${ROWS.toLocaleString("en")} usage records in ${(seeded / 1000).toFixed(1)} s, ` +
      `${rollups!.n.toLocaleString("en")} hourly rollups in ${(rolled / 1000).toFixed(1)} s`,
  );

  async function latencies(path: string): Promise<number[]> {
    for (let i = 0; i < 3; i++) await (await fetch(`${base}${path}`, { headers: auth })).arrayBuffer(); // warm-up
    const times: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const start = performance.now();
      const res = await fetch(`${base}${path}`, { headers: auth });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`${path}: ${res.status}`);
      times.push(performance.now() - start);
    }
    return times.sort((a, b) => a - b);
  }
  for (const path of ["/v1/usage/tokens?days=365&interval=day", "/v1/usage/breakdown?days=365"]) {
    const times = await latencies(path);
    const p50 = percentile(times, 0.5);
    console.log(
      `${path.padEnd(40)} p50 ${p50.toFixed(1)} ms, p95 ${percentile(times, 0.95).toFixed(1)} ms ` +
        `(${SAMPLES} requests; target p50 ≤ ${TARGETS.p50Ms} ms: ${verdict(p50 <= TARGETS.p50Ms)})`,
    );
  }

  const edgePid = supervisor.child("edge")!.pid!;
  const before = memoryOf(edgePid);
  t = performance.now();
  const res = await fetch(`${base}/v1/usage/export?days=365`, { headers: auth });
  if (res.status !== 200) throw new Error(`export: ${res.status} ${await res.text()}`);
  let lines = 0;
  let bytes = 0;
  for await (const chunk of res.body! as AsyncIterable<Uint8Array>) {
    bytes += chunk.length;
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
  }
  const seconds = (performance.now() - t) / 1000;
  const rows = lines - 1; // the header
  const after = memoryOf(edgePid);
  const rate = rows / seconds;
  console.log(
    `/v1/usage/export?days=365: ${rows.toLocaleString("en")} rows, ${(bytes / 1e6).toFixed(1)} MB in ` +
      `${seconds.toFixed(2)} s = ${Math.round(rate).toLocaleString("en")} rows/s ` +
      `(target ≥ ${TARGETS.exportRowsPerSecond.toLocaleString("en")}: ${verdict(rate >= TARGETS.exportRowsPerSecond)})`,
  );
  console.log(
    `edge RSS: ${before.rssMb.toFixed(0)} MB before the export, peak (VmHWM) ${after.peakMb.toFixed(0)} MB ` +
      `(target < ${TARGETS.edgePeakRssMb} MB: ${verdict(after.peakMb < TARGETS.edgePeakRssMb)})`,
  );
  if (rows !== ROWS) throw new Error(`the export has ${rows} rows, expected ${ROWS}`);
} finally {
  await supervisor.stopAll();
  await db.end().catch(() => undefined);
  const nc = await connect({ servers: TEST_NATS_URL });
  await (await jetstreamManager(nc)).streams.delete(eventNames(prefix).usageStream).catch(() => undefined);
  await nc.close();
  await dropDatabase(databaseUrl);
}
