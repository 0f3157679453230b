/**
 * Settlement throughput: how many usage.completed events billing consumes from JetStream and
 * commits per second (usage row, hourly rollup, one balanced journal entry per batch with a leg per
 * account, wallet and lease hold updates, all durable: synchronous_commit stays on).
 *
 *   npm run bench:settlement                      # 20,000 events
 *   BENCH_EVENTS=50000 SETTLE_BATCH_SIZE=500 npm run bench:settlement
 *
 * It uses a fresh database and a fresh stream prefix, the real billing server (startBilling) and
 * its durable consumer. Each account gets one admission lease, granted by billing's own GrantLease,
 * holding the worst case of every request the bench then settles on it (as an edge that admitted
 * them all on one lease would). Every other request is served by a hoster (BENCH_HOSTER_EVERY=n:
 * one in n), so the revenue split and the hosters' rollup are part of what is measured. Besides
 * the rate it prints the CPU time per settled event of billing and of PostgreSQL.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import pg from "pg";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { newRequestId } from "@mkt/runtime/ids";
import { createLogger } from "@mkt/runtime/logger";
import { eventNames } from "@mkt/runtime/nats";
import { costMicros, splitRevenue } from "@mkt/runtime/money";
import { dropDatabase, freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { loadBillingConfig } from "../services/billing/src/config.ts";
import { reconcile } from "../services/billing/src/wallets/reconciliation.ts";
import { LOAD_GENERATOR, measureProcesses, pidsNamed } from "./gateway/process-stats.ts";
import { startBilling } from "../services/billing/src/server.ts";

const EVENTS = Number(process.env.BENCH_EVENTS ?? 20_000);
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 500);
const PUBLISH_WINDOW = 2_000; // publishes in flight at once
const PRICES = { input: 500_000n, output: 1_500_000n }; // the demo model's, micro-USD per 1M tokens
const TOKENS = { input: 100n, maxOutput: 200n, output: 150n };
const HOSTER_EVERY = Number(process.env.BENCH_HOSTER_EVERY ?? 2);
const HOSTER_ID = "00000000-0000-4000-8000-00000000b0b0";
const POSTGRES = "postgres";

const log = createLogger("bench", process.env.LOG_LEVEL ?? "warn");
const databaseUrl = await freshDatabaseUrl();
const prefix = freshEventsPrefix();
const names = eventNames(prefix);
// A wide tier: the grants below admit every request of the run at once.
const config = loadBillingConfig({
  ...(await testCertificates()).env("billing"),
  TIERS: JSON.stringify({ free: { limit_per_minute: 1_000_000, limit_per_day: 100_000_000 } }),
  DATABASE_URL: databaseUrl,
  NATS_URL: TEST_NATS_URL,
  EVENTS_PREFIX: prefix,
  GRPC_PORT: "0",
  METRICS_PORT: "0",
  SECRETS_KEY: randomBytes(32).toString("hex"),
  ...(process.env.SETTLE_BATCH_SIZE ? { SETTLE_BATCH_SIZE: process.env.SETTLE_BATCH_SIZE } : {}),
  ...(process.env.SETTLE_BATCH_WINDOW_MS ? { SETTLE_BATCH_WINDOW_MS: process.env.SETTLE_BATCH_WINDOW_MS } : {}),
});
const worstCase = costMicros(TOKENS.input, TOKENS.maxOutput, PRICES.input, PRICES.output);
const cost = costMicros(TOKENS.input, TOKENS.output, PRICES.input, PRICES.output);
const hosterEvents = HOSTER_EVERY > 0 ? Math.ceil(EVENTS / HOSTER_EVERY) : 0;

// The lease closer must not release the bench's leases while it runs (their edge never beats).
const options = { leaseCloserIntervalMs: 3_600_000 };
const perAccount = (n: number) => Math.floor(EVENTS / ACCOUNTS) + (n < EVENTS % ACCOUNTS ? 1 : 0);

// 1. A first start migrates the schema and creates the stream and the durable consumer, and
//    grants each account one lease holding the worst case of all its requests; it is stopped
//    again so the events below queue up as a backlog.
let t = performance.now();
const leases: string[] = [];
{
  const first = await startBilling(config, log, options);
  const client = createClient(BillingServiceClient, `127.0.0.1:${first.port}`, (await testCertificates()).tls("edge"));
  const billing = promiseClient(client);
  const edgeId = `edge_${randomUUID()}`;
  for (let n = 0; n < ACCOUNTS; n++) {
    const { lease } = await billing.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: BigInt(n + 1),
      accountId: randomUUID(),
      tier: "free",
      minCreditMicros: 0n,
      request: {
        creditMicros: worstCase * BigInt(perAccount(n)),
        requests: BigInt(perAccount(n)),
        tokens: 0n,
        subscriptionId: "",
        keyId: "",
      },
    });
    leases.push(lease!.leaseId);
  }
  client.close();
  await first.close();
}

const db = new pg.Client({ connectionString: databaseUrl, options: "-c search_path=billing" });
await db.connect();
const nc = await connect({ servers: TEST_NATS_URL });
try {
  const accounts = (
    await db.query<{ id: string; account_id: string }>(`select id, account_id from leases where id = any($1)`, [leases])
  ).rows;
  const requests = Array.from({ length: EVENTS }, (_, i) => {
    const hosted = HOSTER_EVERY > 0 && i % HOSTER_EVERY === 0;
    return {
      requestId: newRequestId(),
      lease: accounts[i % ACCOUNTS]!,
      provider: hosted ? "hoster" : "local",
      hosterId: hosted ? HOSTER_ID : "",
    };
  });
  console.log(`granted ${ACCOUNTS} leases for ${EVENTS} requests in ${ms(t)} ms`);

  // 3. EVENTS usage.completed events, as registry publishes them (Nats-Msg-Id = request_id).
  t = performance.now();
  const js = jetstream(nc);
  const startedAt = new Date().toISOString();
  for (let i = 0; i < requests.length; i += PUBLISH_WINDOW) {
    await Promise.all(
      requests.slice(i, i + PUBLISH_WINDOW).map(({ requestId, lease, provider, hosterId }) => {
        const event = UsageCompleted.fromPartial({
          requestId,
          accountId: lease.account_id,
          keyId: "key-bench",
          modelId: "demo-small",
          provider,
          hosterId,
          leaseId: lease.id,
          worstCaseMicros: worstCase,
          inputPricePer1mMicros: PRICES.input,
          outputPricePer1mMicros: PRICES.output,
          inputTokens: TOKENS.input,
          outputTokens: TOKENS.output,
          latencyMs: 250n,
          success: true,
          startedAt,
        });
        return js.publish(names.usageCompleted, UsageCompleted.encode(event).finish(), { msgID: requestId });
      }),
    );
  }
  const publishMs = ms(t);
  console.log(`published ${EVENTS} events in ${publishMs} ms (${rate(EVENTS, publishMs)} events/s)`);

  // 4. Billing starts on the backlog; the clock stops when the last usage record is committed.
  //    Billing runs in this process, so this process's CPU is billing's (the count polled every
  //    50 ms is noise next to it); PostgreSQL's is that of the backends connected to this run's
  //    database, so other databases on a shared server do not count.
  t = performance.now();
  const writesBefore = await tableWrites(db);
  const cpu = measureProcesses({ [POSTGRES]: () => backendsOf(databaseUrl) });
  const billing = await startBilling(config, log, options);
  let settled = 0;
  while (settled < EVENTS) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    settled = Number((await db.query(`select count(*) as n from usage_records`)).rows[0].n);
  }
  const settleMs = ms(t);
  // The rollups are folded off the settlement transaction: their cost counts once folded.
  while (await rollupsPending(db)) await new Promise((resolve) => setTimeout(resolve, 50));
  const foldedMs = ms(t);
  const spent = cpu.stop();
  await billing.close();
  const writes = await writesSince(db, writesBefore);

  // 5. The run counts only if it settled everything exactly once and kept the books straight.
  const check = (
    await db.query(`select
      (select count(*) from usage_records) as records,
      (select sum(cost_micros) from usage_records) as charged,
      (select count(*) from leases where held_micros <> 0) as unsettled,
      (select sum(held_micros) from wallets) as held,
      (select sum(amount_micros) from ledger_postings) as postings,
      (select count(*) from wallets w where posted_micros <> (select sum(amount_micros) from ledger_postings
         where ledger_account = 'customer:' || w.account_id)) as mismatched,
      (select coalesce(sum(hoster_earned_micros), 0) from usage_records) as hoster_earned,
      (select coalesce(sum(hoster_earned_micros), 0) from hoster_usage_daily) as hoster_rollup,
      (select current_setting('synchronous_commit')) as synchronous_commit`)
  ).rows[0];
  const ok =
    Number(check.records) === EVENTS &&
    BigInt(check.charged) === BigInt(EVENTS) * cost &&
    Number(check.unsettled) === 0 &&
    BigInt(check.held) === 0n &&
    BigInt(check.postings) === 0n &&
    Number(check.mismatched) === 0 &&
    BigInt(check.hoster_earned) === BigInt(hosterEvents) * splitRevenue(cost, true).hosterEarned &&
    BigInt(check.hoster_rollup) === BigInt(check.hoster_earned);
  // Every batch entry's legs the sums of its records, every split exact, wallets and holds right.
  const discrepancies = await reconcile(async (sql) => (await db.query(sql)).rows);
  const entries = (await db.query(`select count(*)::int as n from journal_entries where kind = 'usage_batch'`)).rows[0]
    .n;
  console.log(
    `settled ${EVENTS} events in ${settleMs} ms: ${rate(EVENTS, settleMs)} events/s consumed and committed ` +
      `(SETTLE_BATCH_SIZE=${config.SETTLE_BATCH_SIZE}, SETTLE_BATCH_WINDOW_MS=${config.SETTLE_BATCH_WINDOW_MS}, synchronous_commit=${check.synchronous_commit}, ` +
      `${ACCOUNTS} accounts, ${hosterEvents} served by a hoster; includes billing start-up)`,
  );
  const perEvent = (cpuMs: number) => ((cpuMs * 1000) / EVENTS).toFixed(1);
  console.log(`rollups folded ${foldedMs - settleMs} ms after the last record`);
  console.log(
    `CPU per settled event: billing ${perEvent(spent[LOAD_GENERATOR]!.cpuMs)} µs, ` +
      `PostgreSQL ${perEvent(spent[POSTGRES]!.cpuMs)} µs (this database's backends; billing's start-up included)`,
  );
  console.log(
    `row writes per settled event: ${(writes.total / EVENTS).toFixed(2)} ` +
      `(${writes.tables.map(([table, n]) => `${table} ${(n / EVENTS).toFixed(2)}`).join(", ")}); ` +
      `HOT updates ${writes.hotShare}`,
  );
  console.log(
    ok
      ? "check: every event settled once, lease holds released, ledger balanced, hoster shares and rollup exact"
      : `CHECK FAILED: ${JSON.stringify(check)}`,
  );
  console.log(
    discrepancies.length === 0
      ? `reconciliation: nothing found (${entries} batch journal entries)`
      : `RECONCILIATION FAILED: ${JSON.stringify(discrepancies.slice(0, 10))} (${discrepancies.length} in all)`,
  );
  if (!ok || discrepancies.length > 0) process.exitCode = 1;
} finally {
  await db.end();
  await (await jetstreamManager(nc)).streams.delete(names.usageStream).catch(() => undefined);
  await nc.close();
  await dropDatabase(databaseUrl);
}

/** Whether settled batches' rollup deltas still wait for their fold (none before rollups were folded). */
async function rollupsPending(db: pg.Client): Promise<boolean> {
  const { rows } = await db.query(`select to_regclass('usage_rollup_queue') is not null as queued`);
  if (!rows[0].queued) return false;
  return (await db.query(`select exists (select 1 from usage_rollup_queue) as pending`)).rows[0].pending as boolean;
}

type Writes = Map<string, { rows: number; updates: number; hot: number }>;

/**
 * Rows inserted, updated and deleted per table of billing's schema so far (pg_stat_user_tables,
 * this database only; a backend reports its counts when it goes idle or exits). A partition's
 * rows count as its table's (usage_records' months).
 */
async function tableWrites(db: pg.Client): Promise<Writes> {
  await db.query(`select pg_stat_clear_snapshot()`);
  const { rows } = await db.query(
    `select coalesce(p.relname, s.relname) as relname, sum(s.n_tup_ins + s.n_tup_upd + s.n_tup_del) as rows,
       sum(s.n_tup_upd) as updates, sum(s.n_tup_hot_upd) as hot
     from pg_stat_user_tables s
     left join pg_inherits i on i.inhrelid = s.relid left join pg_class p on p.oid = i.inhparent
     where s.schemaname = 'billing' group by 1`,
  );
  return new Map(
    rows.map((r) => [r.relname as string, { rows: Number(r.rows), updates: Number(r.updates), hot: Number(r.hot) }]),
  );
}

/** Row writes per table since `before`, once billing's backends have exited and reported them. */
async function writesSince(db: pg.Client, before: Writes) {
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  const after = await tableWrites(db);
  const tables: Array<[string, number]> = [];
  let updates = 0;
  let hot = 0;
  for (const [table, now] of after) {
    const was = before.get(table) ?? { rows: 0, updates: 0, hot: 0 };
    if (now.rows > was.rows) tables.push([table, now.rows - was.rows]);
    updates += now.updates - was.updates;
    hot += now.hot - was.hot;
  }
  tables.sort((a, b) => b[1] - a[1]);
  return {
    total: tables.reduce((sum, [, n]) => sum + n, 0),
    tables,
    hotShare: updates > 0 ? `${Math.round((hot * 100) / updates)}%` : "n/a",
  };
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

function ms(since: number): number {
  return Math.round(performance.now() - since);
}

function rate(count: number, millis: number): string {
  return Math.round((count * 1000) / millis).toLocaleString("en-US");
}
