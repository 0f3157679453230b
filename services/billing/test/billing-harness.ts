import pg from "pg";
import { randomBytes, randomUUID } from "node:crypto";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { ClientUnaryCall, Metadata, CallOptions, ServiceError } from "@grpc/grpc-js";
import type { CallSettings } from "@mkt/runtime/grpc-client";
import { newRequestId } from "@mkt/runtime/ids";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { createLogger, type Logger } from "@mkt/runtime/logger";
import { eventNames } from "@mkt/runtime/nats";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { allowedCallerClient, testCertificates } from "@mkt/testkit/test-certificates";
import { costMicros } from "@mkt/runtime/money";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { LeaseResource, type LeaseRoom } from "@mkt/proto/billing/v1/leases";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { loadBillingConfig } from "../src/config.ts";
import { entities } from "../src/entities.ts";
import { startBilling, type BillingOptions } from "../src/server.ts";
import { BILLING_CALLERS } from "../src/billing-callers.ts";
import { reconcile } from "../src/wallets/reconciliation.ts";

type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: Metadata,
  options: Partial<CallOptions>,
  callback: (error: ServiceError | null, response: Res) => void,
) => ClientUnaryCall;

/**
 * The promise methods of a ts-proto client. Runtime's `PromiseClient<C>` filters methods with
 * `UnaryMethod<never, never>`, which no generated method satisfies (the callback's response
 * cannot be `never`), so it maps to `{}`; `UnaryMethod<never, unknown>` is the working filter.
 */
type PromiseMethods<C> = {
  [K in keyof C as C[K] extends UnaryMethod<never, unknown> ? K : never]: C[K] extends UnaryMethod<infer Req, infer Res>
    ? (request: Req, settings?: CallSettings) => Promise<Res>
    : never;
};

/**
 * A real billing process for one test file: its own database and NATS prefix, a real gRPC
 * client, a JetStream publisher and a direct SQL connection for checking what was stored.
 */
export async function startTestBilling(env: Record<string, string> = {}, options: BillingOptions = {}) {
  const prefix = freshEventsPrefix();
  const certs = await testCertificates();
  const config = loadBillingConfig({
    ...certs.env("billing"),
    DATABASE_URL: await freshDatabaseUrl(),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: prefix,
    GRPC_PORT: "0",
    // Test files run in parallel: a fixed port would collide.
    METRICS_PORT: "0",
    SECRETS_KEY: randomBytes(32).toString("hex"),
    ...env,
  });
  const billing = await startBilling(config, createLogger("billing-test", process.env.TEST_LOG_LEVEL ?? "silent"), {
    counterPruneIntervalMs: 3_600_000, // tests move billing's clock; old windows stay readable
    janitorIntervalMs: 3_600_000, // tests run the subscription janitor themselves
    renewalIntervalMs: 3_600_000, // and renewal passes, at the times they choose
    leaseCloserIntervalMs: 3_600_000, // and the lease closer
    leaseCloserAtStart: false,
    ...options,
  });
  const callers = allowedCallerClient(BillingServiceClient, `127.0.0.1:${billing.port}`, BILLING_CALLERS, certs);
  const client = callers.client as unknown as PromiseMethods<BillingServiceClient>;
  const db = new pg.Client({ connectionString: config.DATABASE_URL, options: "-c search_path=billing" });
  await db.connect();
  const nc: NatsConnection = await connect({ servers: TEST_NATS_URL });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const names = eventNames(prefix);

  return {
    billing,
    config,
    /** Billing's clock (the test's, when it gave one). */
    clock: options.clock ?? (() => new Date()),
    client,
    db,
    names,
    /** Publishes a usage.completed event; msgID defaults to the request id, as registry does. */
    async publishUsage(event: Partial<UsageCompleted>, msgID = event.requestId) {
      const data = UsageCompleted.encode(UsageCompleted.fromPartial(event)).finish();
      await js.publish(names.usageCompleted, data, msgID ? { msgID } : {});
    },
    async publishRaw(data: Uint8Array, msgID: string) {
      await js.publish(names.usageCompleted, data, { msgID });
    },
    /**
     * Waits until the settlement consumer has taken and acknowledged everything published, then
     * folds the settled batches' rollup deltas, so reports read next see them (they would within
     * ROLLUP_FOLD_INTERVAL_MS).
     */
    async waitSettled() {
      await waitFor(
        () => jsm.consumers.info(names.usageStream, names.settlerConsumer),
        (info) => info.num_pending === 0 && info.num_ack_pending === 0,
      );
      await this.billing.foldRollups();
    },
    async query<R extends Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<R[]> {
      return (await db.query<R>(sql, params)).rows;
    },
    async close() {
      callers.close();
      await db.end();
      // The one running now: a test may have replaced the first (a restart).
      await this.billing.close();
      // The stream is this file's alone; leave nothing behind in the shared NATS server.
      await jsm.streams.delete(names.usageStream).catch(() => undefined);
      await nc.drain();
    },
  };
}

export type TestBilling = Awaited<ReturnType<typeof startTestBilling>>;

/** One request's usage for settleOnLease: the event's fields (account required) and the tier. */
export type LeaseUsage = Partial<UsageCompleted> & { accountId: string; tier?: string };

/**
 * An ORM on the test billing's database, migrated already, for tests that call billing's functions
 * (settlement, lease reads) directly rather than through its gRPC API.
 */
export function openTestOrm(
  t: Pick<TestBilling, "config">,
  log: Logger = createLogger("billing-test", "silent"),
): Promise<Orm> {
  return openDatabase({ url: t.config.DATABASE_URL, schema: "billing", entities, migrations: [], migrate: false, log });
}

/**
 * Admits one request the way production does (docs/architecture.md#admission-on-a-lease): a fresh
 * edge is granted a lease on the account with room for the request's worst case (in the
 * subscription's budget when the event names one), admits the request on it and returns the lease,
 * as an edge going idle does (its final report admits all the room, and no slot is in flight: the
 * request's call has ended), so no room is left unreported for reports or later grants to see.
 * Returns the request's usage.completed as registry would publish it on that lease (not yet
 * published). Defaults: a local model at $0.50 / $1.50 per 1M tokens, a worst case of exactly the
 * event's cost at its prices and of its tokens, the included tokens its budget was granted (at most
 * its worst case's), billing's clock for the request's time (its started_at). A refused grant throws its error.
 */
export async function admitOnLease(t: TestBilling, usage: LeaseUsage): Promise<UsageCompleted> {
  const { tier = "free", ...fields } = usage;
  const event = UsageCompleted.fromPartial({
    requestId: newRequestId(),
    startedAt: t.clock().toISOString(),
    keyId: "key_1",
    modelId: "demo-small",
    provider: "local",
    inputPricePer1mMicros: 500_000n,
    outputPricePer1mMicros: 1_500_000n,
    success: true,
    latencyMs: 10n,
    ...fields,
  });
  const tokens = event.inputTokens + event.outputTokens;
  if (usage.worstCaseTokens === undefined) event.worstCaseTokens = tokens;
  if (usage.worstCaseMicros === undefined) {
    event.worstCaseMicros = costMicros(
      event.inputTokens,
      event.outputTokens,
      event.inputPricePer1mMicros,
      event.outputPricePer1mMicros,
    );
  }
  const edgeId = `edge_${randomUUID()}`;
  const { lease } = await t.client.grantLease({
    edgeId,
    incarnation: 0n,
    bootId: "",
    sequence: 1n,
    accountId: event.accountId,
    tier,
    minCreditMicros: 0n,
    request: {
      creditMicros: event.worstCaseMicros,
      requests: 1n,
      tokens: event.subscriptionId ? event.worstCaseTokens : 0n,
      subscriptionId: event.subscriptionId,
      keyId: event.keyId,
    },
  });
  const rooms = [lease!.credit, ...lease!.rooms, ...lease!.budgets.flatMap((b) => b.rooms)].filter(
    (room): room is LeaseRoom => room !== undefined,
  );
  await t.client.returnLeases({
    edgeId,
    incarnation: 0n,
    bootId: "",
    sequence: 2n,
    leases: [
      {
        leaseId: lease!.leaseId,
        admitted: rooms.map((r) => ({
          allowanceId: r.allowanceId,
          admitted: r.resource === LeaseResource.LEASE_RESOURCE_SLOTS ? 0n : r.granted,
        })),
        final: true,
        budgetDemand: [],
        nextWindow: false,
        slotsPinned: true,
      },
    ],
  });
  event.leaseId = lease!.leaseId;
  if (usage.includedTokens === undefined) {
    // As the edge's takeWorstCase: the included tokens of its worst case the budget had room for.
    const included = rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS)?.granted ?? 0n;
    event.includedTokens = included < event.worstCaseTokens ? included : event.worstCaseTokens;
  }
  return event;
}

/** Usage made the way production makes it: admitOnLease, then its event published and settled. */
export async function settleOnLease(t: TestBilling, usage: LeaseUsage): Promise<UsageCompleted> {
  const event = await admitOnLease(t, usage);
  await t.publishUsage(event);
  await t.waitSettled();
  return event;
}

/** Polls `read` until `done` accepts its value (settlement is asynchronous). */
export async function waitFor<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms; last value: ${String(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Ledger invariants: every journal entry sums to zero (so all postings do), and each wallet's
 * posted balance equals the sum of its customer postings. It also runs the whole reconciliation
 * (reconciliation.ts) and throws, listing them, on any other discrepancy (a leg that is not the
 * sum of its records, a record's split, a charge no entry posted, a hold), so every test that
 * checks the books checks all of them.
 */
export async function ledgerInvariants(t: Pick<TestBilling, "query">) {
  const discrepancies = await reconcile((sql) => t.query(sql));
  const others = discrepancies.filter((d) => d.check !== "unbalanced_entry" && d.check !== "wallet_postings");
  if (others.length > 0) throw new Error(`the books do not reconcile: ${JSON.stringify(others)}`);
  const [total] = await t.query<{ sum: string | null }>(`select sum(amount_micros)::text as sum from ledger_postings`);
  const unbalanced = await t.query(
    `select entry_id from ledger_postings group by entry_id having sum(amount_micros) <> 0`,
  );
  const mismatched = await t.query(
    `select w.account_id from wallets w
     left join (select ledger_account, sum(amount_micros) as s from ledger_postings group by ledger_account) p
       on p.ledger_account = 'customer:' || w.account_id
     where w.posted_micros <> coalesce(p.s, 0)`,
  );
  return {
    totalPostings: BigInt(total?.sum ?? "0"),
    unbalancedEntries: unbalanced.length,
    mismatchedWallets: mismatched.length,
  };
}

/**
 * What the ledger charged the customer for one request (`v`, null when nothing), read as an
 * auditor would now that a settled batch posts one entry (docs/adr/0040-one-journal-entry-per-settled-batch.md):
 * the request's usage record's cost, counted only if the record names a `usage_batch` entry
 * whose customer leg for its account is exactly the sum over that entry's records of that
 * account (each charged once: the record is unique on request id). A per-request `usage` entry
 * of an earlier settlement still answers by its reference. `$1` is the request id.
 */
export const REQUEST_CHARGE_SQL = `
  select coalesce(
    (select r.cost_micros from usage_records r
      join journal_entries e on e.id = r.entry_id and e.kind = 'usage_batch'
      join ledger_postings p on p.entry_id = e.id and p.ledger_account = 'customer:' || r.account_id
      where r.request_id = $1::text::uuid and -p.amount_micros = (select sum(o.cost_micros - o.write_off_micros)
        from usage_records o where o.entry_id = r.entry_id and o.account_id = r.account_id)),
    (select -sum(p.amount_micros) from journal_entries e join ledger_postings p on p.entry_id = e.id
      where e.kind = 'usage' and e.reference = $1::text and p.ledger_account like 'customer:%')
  )::text as v`;

/** One request's settlement: its usage record's money, its batch entry's legs and how many records that entry sums. */
export async function settlementOf(t: Pick<TestBilling, "query">, requestId: string) {
  const [record] = await t.query<{
    cost_micros: string;
    platform_fee_micros: string;
    hoster_earned_micros: string;
    write_off_micros: string;
    entry_id: string | null;
  }>(
    `select cost_micros, platform_fee_micros, hoster_earned_micros, write_off_micros, entry_id
     from usage_records where request_id = $1`,
    [requestId],
  );
  if (!record) throw new Error(`no usage record for ${requestId}`);
  const legs = await t.query<{ ledger_account: string; amount_micros: string }>(
    `select ledger_account, amount_micros from ledger_postings where entry_id = $1 order by ledger_account`,
    [record.entry_id],
  );
  const [{ n }] = (await t.query<{ n: number }>(`select count(*)::int as n from usage_records where entry_id = $1`, [
    record.entry_id,
  ])) as [{ n: number }];
  return {
    record,
    legs: Object.fromEntries(legs.map((l) => [l.ledger_account, l.amount_micros])),
    recordsInEntry: n,
  };
}

/**
 * What one request moved, by ledger account ({} when nothing): its usage record's legs (the
 * customer pays cost less write-off, the platform keeps the fee and absorbs the write-off, the
 * hoster earns the rest), checked against the ledger: its batch's journal entry must post, per
 * account, exactly the sum of the legs of the records that name it, or this throws.
 */
export async function requestLegs(t: Pick<TestBilling, "query">, requestId: string): Promise<Record<string, bigint>> {
  const legsOf = `select r.entry_id, l.account, sum(l.amount)::text as amount from usage_records r
    cross join lateral (values ('customer:' || r.account_id, r.write_off_micros - r.cost_micros),
      ('platform:revenue', r.platform_fee_micros), ('hoster:' || r.hoster_id, r.hoster_earned_micros),
      ('platform:write_offs', -r.write_off_micros)) as l(account, amount)`;
  const mine = await t.query<{ entry_id: string | null; account: string; amount: string }>(
    `${legsOf} where r.request_id = $1 group by 1, 2 having sum(l.amount) <> 0`,
    [requestId],
  );
  const entryId = mine[0]?.entry_id;
  if (entryId) {
    const expected = await t.query(
      `${legsOf} where r.entry_id = $1 group by 1, 2 having sum(l.amount) <> 0 order by 2`,
      [entryId],
    );
    const posted = await t.query(
      `select entry_id, ledger_account as account, amount_micros::text as amount from ledger_postings
       where entry_id = $1 order by 2`,
      [entryId],
    );
    if (JSON.stringify(posted) !== JSON.stringify(expected)) {
      throw new Error(`entry ${entryId} posted ${JSON.stringify(posted)}, its records say ${JSON.stringify(expected)}`);
    }
  }
  return Object.fromEntries(mine.map((l) => [l.account, BigInt(l.amount)]));
}
