/**
 * Settlement throughput: how many usage.completed events billing consumes from JetStream and
 * commits per second (usage row, hourly rollup, balanced ledger entry, wallet and reservation
 * updates, all durable: synchronous_commit stays on).
 *
 *   npm run bench:settlement                      # 20,000 events
 *   BENCH_EVENTS=50000 SETTLE_BATCH_SIZE=500 npm run bench:settlement
 *
 * It uses a fresh database and a fresh stream prefix, the real billing server (startBilling) and
 * its durable consumer. The reservations are seeded with SQL that writes exactly what Authorize
 * writes for an admitted request (wallet with its starting grant, hold, 'held' reservation with
 * the price snapshot): calling Authorize 20,000 times would measure Authorize, which is not the
 * subject here. Rate counters are left out: settlement never reads them. Every other request is
 * served by a hoster (BENCH_HOSTER_EVERY=n: one in n), so the revenue split and the hosters'
 * rollup are part of what is measured.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { createLogger } from "@mkt/runtime/logger";
import { eventNames } from "@mkt/runtime/nats";
import { costMicros, splitRevenue } from "@mkt/runtime/money";
import { dropDatabase, freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { loadBillingConfig } from "../services/billing/src/config.ts";
import { startBilling } from "../services/billing/src/server.ts";

const EVENTS = Number(process.env.BENCH_EVENTS ?? 20_000);
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 500);
const PUBLISH_WINDOW = 2_000; // publishes in flight at once
const PRICES = { input: 500_000n, output: 1_500_000n }; // the demo model's, micro-USD per 1M tokens
const TOKENS = { input: 100n, maxOutput: 200n, output: 150n };
const STARTING_CREDIT = 5_000_000n;
const HOSTER_EVERY = Number(process.env.BENCH_HOSTER_EVERY ?? 2);
const HOSTER_ID = "00000000-0000-4000-8000-00000000b0b0";

const log = createLogger("bench", process.env.LOG_LEVEL ?? "warn");
const databaseUrl = await freshDatabaseUrl();
const prefix = freshEventsPrefix();
const names = eventNames(prefix);
const config = loadBillingConfig({
  DATABASE_URL: databaseUrl,
  NATS_URL: TEST_NATS_URL,
  EVENTS_PREFIX: prefix,
  GRPC_PORT: "0",
  SECRETS_KEY: randomBytes(32).toString("hex"),
  ...(process.env.SETTLE_BATCH_SIZE ? { SETTLE_BATCH_SIZE: process.env.SETTLE_BATCH_SIZE } : {}),
});
const reserved = costMicros(TOKENS.input, TOKENS.maxOutput, PRICES.input, PRICES.output);
const cost = costMicros(TOKENS.input, TOKENS.output, PRICES.input, PRICES.output);
const hosterEvents = HOSTER_EVERY > 0 ? Math.ceil(EVENTS / HOSTER_EVERY) : 0;

// 1. A first start migrates the schema and creates the stream and the durable consumer; it is
//    stopped again so the events below queue up as a backlog.
await (await startBilling(config, log, { sweepIntervalMs: 3_600_000 })).close();

const db = new pg.Client({ connectionString: databaseUrl, options: "-c search_path=billing" });
await db.connect();
const nc = await connect({ servers: TEST_NATS_URL });
try {
  // 2. What Authorize leaves behind for EVENTS admitted requests spread over ACCOUNTS accounts.
  let t = performance.now();
  await db.query("begin");
  await db.query(`create temp table bench_accounts on commit drop as
    select gen_random_uuid() as account_id, n from generate_series(0, ${ACCOUNTS - 1}) n`);
  await db.query(`insert into wallets (account_id, posted_micros, held_micros)
    select account_id, ${STARTING_CREDIT}, ${reserved} * (${EVENTS} / ${ACCOUNTS} + case when n < ${EVENTS} % ${ACCOUNTS} then 1 else 0 end)
    from bench_accounts`);
  await db.query(`insert into journal_entries (id, kind, reference)
    select gen_random_uuid(), 'grant', account_id::text from bench_accounts`);
  await db.query(`insert into ledger_postings (id, entry_id, ledger_account, amount_micros)
    select gen_random_uuid(), e.id, leg.account, leg.amount from journal_entries e
    cross join lateral (values ('platform:grants', -${STARTING_CREDIT}), ('customer:' || e.reference, ${STARTING_CREDIT}))
      as leg(account, amount)
    where e.kind = 'grant'`);
  await db.query(`insert into reservations (id, request_id, account_id, key_id, model_id, provider, hoster_id,
      input_price_per_1m_micros, output_price_per_1m_micros, input_tokens, max_output_tokens, reserved_micros,
      status, created_at, expires_at)
    select gen_random_uuid(), 'bench-' || i, a.account_id, 'key-bench', 'demo-small',
      case when ${HOSTER_EVERY} > 0 and i % ${Math.max(HOSTER_EVERY, 1)} = 0 then 'hoster' else 'local' end,
      case when ${HOSTER_EVERY} > 0 and i % ${Math.max(HOSTER_EVERY, 1)} = 0 then '${HOSTER_ID}' else '' end,
      ${PRICES.input}, ${PRICES.output}, ${TOKENS.input}, ${TOKENS.maxOutput}, ${reserved},
      'held', now(), now() + interval '1 hour'
    from generate_series(0, ${EVENTS - 1}) i join bench_accounts a on a.n = i % ${ACCOUNTS}`);
  await db.query("commit");
  const accounts = (
    await db.query<{ account_id: string; request_id: string; provider: string; hoster_id: string }>(
      `select account_id, request_id, provider, hoster_id from reservations`,
    )
  ).rows;
  console.log(`seeded ${EVENTS} reservations over ${ACCOUNTS} accounts in ${ms(t)} ms`);

  // 3. EVENTS usage.completed events, as registry publishes them (Nats-Msg-Id = request_id).
  t = performance.now();
  const js = jetstream(nc);
  const startedAt = new Date().toISOString();
  for (let i = 0; i < accounts.length; i += PUBLISH_WINDOW) {
    await Promise.all(
      accounts.slice(i, i + PUBLISH_WINDOW).map(({ account_id, request_id, provider, hoster_id }) => {
        const event = UsageCompleted.fromPartial({
          requestId: request_id,
          accountId: account_id,
          keyId: "key-bench",
          modelId: "demo-small",
          provider,
          hosterId: hoster_id,
          inputTokens: TOKENS.input,
          outputTokens: TOKENS.output,
          latencyMs: 250n,
          success: true,
          startedAt,
        });
        return js.publish(names.usageCompleted, UsageCompleted.encode(event).finish(), { msgID: request_id });
      }),
    );
  }
  const publishMs = ms(t);
  console.log(`published ${EVENTS} events in ${publishMs} ms (${rate(EVENTS, publishMs)} events/s)`);

  // 4. Billing starts on the backlog; the clock stops when the last usage record is committed.
  t = performance.now();
  const billing = await startBilling(config, log, { sweepIntervalMs: 3_600_000 });
  let settled = 0;
  while (settled < EVENTS) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    settled = Number((await db.query(`select count(*) as n from usage_records`)).rows[0].n);
  }
  const settleMs = ms(t);
  await billing.close();

  // 5. The run counts only if it settled everything exactly once and kept the books straight.
  const check = (
    await db.query(`select
      (select count(*) from usage_records) as records,
      (select sum(cost_micros) from usage_records) as charged,
      (select count(*) from reservations where status <> 'settled') as unsettled,
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
  console.log(
    `settled ${EVENTS} events in ${settleMs} ms: ${rate(EVENTS, settleMs)} events/s consumed and committed ` +
      `(SETTLE_BATCH_SIZE=${config.SETTLE_BATCH_SIZE}, synchronous_commit=${check.synchronous_commit}, ` +
      `${ACCOUNTS} accounts, ${hosterEvents} served by a hoster; includes billing start-up)`,
  );
  console.log(
    ok
      ? "check: every event settled once, holds released, ledger balanced, hoster shares and rollup exact"
      : `CHECK FAILED: ${JSON.stringify(check)}`,
  );
  if (!ok) process.exitCode = 1;
} finally {
  await db.end();
  await (await jetstreamManager(nc)).streams.delete(names.usageStream).catch(() => undefined);
  await nc.close();
  await dropDatabase(databaseUrl);
}

function ms(since: number): number {
  return Math.round(performance.now() - since);
}

function rate(count: number, millis: number): string {
  return Math.round((count * 1000) / millis).toLocaleString("en-US");
}
