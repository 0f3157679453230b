import pg from "pg";
import { randomBytes, randomUUID } from "node:crypto";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { ClientUnaryCall, Metadata, CallOptions, ServiceError } from "@grpc/grpc-js";
import { createClient, promiseClient, type CallSettings } from "@mkt/runtime/grpc-client";
import { createLogger } from "@mkt/runtime/logger";
import { eventNames } from "@mkt/runtime/nats";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { AuthorizeRequest, BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { loadBillingConfig } from "../src/config.ts";
import { startBilling, type BillingOptions } from "../src/server.ts";

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
  const config = loadBillingConfig({
    DATABASE_URL: await freshDatabaseUrl(),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: prefix,
    GRPC_PORT: "0",
    SECRETS_KEY: randomBytes(32).toString("hex"),
    ...env,
  });
  const billing = await startBilling(config, createLogger("billing-test", process.env.TEST_LOG_LEVEL ?? "silent"), {
    sweepIntervalMs: 3_600_000, // tests call the sweep themselves
    janitorIntervalMs: 3_600_000, // and the subscription janitor
    renewalIntervalMs: 3_600_000, // and renewal passes, at the times they choose
    ...options,
  });
  const grpcClient = createClient(BillingServiceClient, `127.0.0.1:${billing.port}`);
  const client = promiseClient(grpcClient) as unknown as PromiseMethods<BillingServiceClient>;
  const db = new pg.Client({ connectionString: config.DATABASE_URL, options: "-c search_path=billing" });
  await db.connect();
  const nc: NatsConnection = await connect({ servers: TEST_NATS_URL });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  const names = eventNames(prefix);

  return {
    billing,
    config,
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
    /** Waits until the settlement consumer has taken and acknowledged everything published. */
    async waitSettled() {
      await waitFor(
        () => jsm.consumers.info(names.usageStream, names.settlerConsumer),
        (info) => info.num_pending === 0 && info.num_ack_pending === 0,
      );
    },
    async query<R extends Record<string, unknown>>(sql: string, params: unknown[] = []): Promise<R[]> {
      return (await db.query<R>(sql, params)).rows;
    },
    async close() {
      grpcClient.close();
      await db.end();
      await billing.close();
      // The stream is this file's alone; leave nothing behind in the shared NATS server.
      await jsm.streams.delete(names.usageStream).catch(() => undefined);
      await nc.drain();
    },
  };
}

export type TestBilling = Awaited<ReturnType<typeof startTestBilling>>;

/** An Authorize request for a local model at $0.50 / $1.50 per 1M tokens, context 8192, cap 4096. */
export function authorizeRequest(overrides: Partial<AuthorizeRequest> = {}): AuthorizeRequest {
  return AuthorizeRequest.fromPartial({
    requestId: `req_${randomUUID()}`,
    accountId: randomUUID(),
    keyId: "key_1",
    tier: "free",
    modelId: "demo-small",
    provider: "local",
    hosterId: "",
    inputPricePer1mMicros: 500_000n,
    outputPricePer1mMicros: 1_500_000n,
    contextWindow: 8192n,
    maxOutputTokensCap: 4096n,
    inputTokens: 100n,
    requestedMaxOutputTokens: 0n,
    ...overrides,
  });
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
 * posted balance equals the sum of its customer postings.
 */
export async function ledgerInvariants(t: Pick<TestBilling, "query">) {
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
