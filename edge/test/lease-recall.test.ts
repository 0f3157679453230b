import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import type { ServiceTls } from "@mkt/runtime/service-tls";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { AppError } from "@mkt/runtime/errors";
import { createLogger } from "@mkt/runtime/logger";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { startTestBilling, type TestBilling } from "../../services/billing/test/billing-harness.ts";
import { LeaseTable } from "../src/leases/lease-table.ts";
import { followLeaseRecalls } from "../src/leases/lease-recall.ts";

// Billing's recall sender (docs/architecture.md#revocation-stops-at-once) against real edge lease
// tables as the holders.
const TTL = 1_000;
const WAIT = TTL + TTL / 10; // fenceWaitMs(TTL)
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
const log = createLogger("lease-recall-test", "silent");

let t: TestBilling;
let edgeTls: ServiceTls;
let nc: NatsConnection;
const closers: Array<() => void> = [];

/** A real lease table following its recalls on NATS; `stop` closes its subscription. */
function edge() {
  const client = createClient(BillingServiceClient, `127.0.0.1:${t.billing.port}`, edgeTls);
  const table = new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing: promiseClient(client), ttlMs: TTL, log });
  const stop = followLeaseRecalls(nc, t.names.leaseRecall(table.edgeId), table, log);
  closers.push(() => client.close(), stop);
  return { table, stop };
}

beforeAll(async () => {
  edgeTls = (await testCertificates()).tls("edge");
  t = await startTestBilling(
    { LEASE_TTL_MS: String(TTL), MAX_REQUEST_MS: "60000", STARTING_CREDIT_USD: "0.01" },
    { clock: () => new Date(BASE) },
  );
  nc = await connect({ servers: TEST_NATS_URL });
});
afterAll(async () => {
  for (const close of closers) close();
  await nc?.drain();
  await t?.close();
});

async function subscription() {
  const accountId = randomUUID();
  const id = randomUUID();
  const hosterId = randomUUID();
  await t.query(
    `insert into subscriptions (id, account_id, idempotency_key, product_id, status, hoster_id, pricing_model,
       included_tokens, rpm_limit, tpm_limit, max_concurrent, max_output_tokens, max_context_tokens,
       period_index, period_start, period_end, activated_at, created_at)
     values ($1, $2, 'k', $3, 'active', $4, 'free', 0, 60, 100000, 4, 4096, 8192, 0, $5, $6, $5, $5)`,
    [id, accountId, randomUUID(), hosterId, new Date(BASE - 86_400_000), new Date(BASE + 20 * 86_400_000)],
  );
  return { accountId, id, hosterId };
}

const admitOn = (table: LeaseTable, sub: { accountId: string; id: string }) =>
  table.admit({ accountId: sub.accountId, tier: "free", subscriptionId: sub.id });

async function refusal(p: Promise<unknown>): Promise<number> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  return err instanceof AppError ? err.httpStatus : 0;
}

describe("billing recalls fenced leases from their edges", () => {
  it("cancel answers once both holding tables acked, and both then refuse the key 401", async () => {
    const a = edge();
    const b = edge();
    const sub = await subscription();
    await admitOn(a.table, sub);
    await admitOn(b.table, sub);
    const started = performance.now();
    await t.client.cancelSubscription({ accountId: sub.accountId, subscriptionId: sub.id });
    expect(performance.now() - started).toBeLessThan(WAIT / 2);
    for (const table of [a.table, b.table]) {
      expect(table.leaseOf(sub.accountId)?.budgets.get(sub.id)?.open).toBe(false);
      expect(await refusal(admitOn(table, sub))).toBe(401);
    }
    // A repeated DELETE finds both budgets dropped already: it answers as soon as they ack again.
    const again = performance.now();
    await t.client.cancelSubscription({ accountId: sub.accountId, subscriptionId: sub.id });
    expect(performance.now() - again).toBeLessThan(WAIT / 2);
  });

  it("a holder that never acks delays cancel by one TTL + margin, not more", async () => {
    const a = edge();
    const b = edge();
    const sub = await subscription();
    await admitOn(a.table, sub);
    await admitOn(b.table, sub);
    b.stop();
    const started = performance.now();
    await t.client.cancelSubscription({ accountId: sub.accountId, subscriptionId: sub.id });
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(WAIT - 50);
    expect(took).toBeLessThan(WAIT + 500);
    expect(await refusal(admitOn(a.table, sub))).toBe(401);
  });

  it("pause answers after the recall, and both tables then refuse 403", async () => {
    const a = edge();
    const b = edge();
    const sub = await subscription();
    await admitOn(a.table, sub);
    await admitOn(b.table, sub);
    const started = performance.now();
    // The pause commits and recalls before the reply is built; building it asks accounts for the
    // subscriber's e-mail, which this test does not run, so the reply itself fails.
    await t.client.pauseSubscription({ hosterId: sub.hosterId, subscriptionId: sub.id }).catch(() => undefined);
    expect(performance.now() - started).toBeLessThan(WAIT / 2);
    for (const table of [a.table, b.table]) expect(await refusal(admitOn(table, sub))).toBe(403);
  });

  it("serves an account whose credit sits in another table's lease by recalling it", async () => {
    const a = edge();
    const b = edge();
    const accountId = randomUUID();
    // A is granted 9,000 of the 10,000 micro-USD but uses 100 of it (not yet reported).
    const ticket = await a.table.admit({ accountId, tier: "free", atLeast: { credit: 9_000n, tokens: 0n } });
    await a.table.takeWorstCase(ticket, { credit: 100n, tokens: 0n, maxOutputTokens: 1n });
    const started = performance.now();
    const got = await b.table.admit({ accountId, tier: "free", atLeast: { credit: 5_000n, tokens: 0n } });
    expect(performance.now() - started).toBeLessThan(500);
    expect(got.lease.credit!.granted).toBeGreaterThanOrEqual(5_000n);
    expect(a.table.leaseOf(accountId)).toBeUndefined();
    const [closed] = await t.query<{ status: string; held: string }>(
      `select status, held_micros::text as held from leases where id = $1`,
      [ticket.lease.leaseId],
    );
    expect(closed).toEqual({ status: "closed", held: "100" });
  });

  it("serves a subscription whose slots were lent to another table by recalling that budget", async () => {
    const a = edge();
    const b = edge();
    const sub = await subscription(); // max_concurrent 4
    // A takes all four slots, and its requests end before its next heartbeat: billing still
    // counts the four slots lent to A.
    const tickets = await Promise.all(Array.from({ length: 4 }, () => admitOn(a.table, sub)));
    for (const ticket of tickets) a.table.release(ticket);
    // No heartbeat runs here: only the recall can give B a slot.
    const got = await admitOn(b.table, sub);
    expect(got.slot).toBeDefined();
    // A admits no more on that budget (its whole lease may have gone too, when B's grant also
    // needed the account's request room A held).
    expect(a.table.leaseOf(sub.accountId)?.budgets.get(sub.id)?.open ?? false).toBe(false);
    // A's next request re-grants its budget and gets the slots B does not hold.
    b.table.release(got);
    expect((await admitOn(a.table, sub)).slot).toBeDefined();
  });

  it("still refuses 429 when every slot is in flight on another table, which keeps them", async () => {
    const a = edge();
    const b = edge();
    const sub = await subscription();
    const tickets = await Promise.all(Array.from({ length: 4 }, () => admitOn(a.table, sub)));
    // Billing cannot tell lent slots from used ones until A reports: it recalls A's budget, whose
    // ack says all four are in flight, and refuses B.
    expect(await refusal(admitOn(b.table, sub))).toBe(429);
    const [slots] = await t.query<{ granted: string; admitted: string }>(
      `select granted::text, admitted::text from lease_allowances where lease_id = $1 and resource = 'slots'`,
      [tickets[0]!.lease.leaseId],
    );
    expect(slots).toEqual({ granted: "4", admitted: "4" });
    for (const ticket of tickets) a.table.release(ticket);
  });

  it("refuses 402 at once, recalling nothing, when other tables' room could not cover the request", async () => {
    const a = edge();
    const b = edge();
    const accountId = randomUUID();
    const ticket = await a.table.admit({ accountId, tier: "free", atLeast: { credit: 9_000n, tokens: 0n } });
    await a.table.takeWorstCase(ticket, { credit: 100n, tokens: 0n, maxOutputTokens: 1n });
    const started = performance.now();
    expect(await refusal(b.table.admit({ accountId, tier: "free", atLeast: { credit: 20_000n, tokens: 0n } }))).toBe(
      402,
    );
    expect(performance.now() - started).toBeLessThan(200);
    expect(a.table.leaseOf(accountId)?.leaseId).toBe(ticket.lease.leaseId);
    const [open] = await t.query<{ status: string }>(`select status from leases where id = $1`, [ticket.lease.leaseId]);
    expect(open!.status).toBe("open");
  });
});
