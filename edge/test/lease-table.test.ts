import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InterceptingCall, status as grpcStatus, type Interceptor } from "@grpc/grpc-js";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import type { ServiceTls } from "@mkt/runtime/service-tls";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { AppError } from "@mkt/runtime/errors";
import { createLogger } from "@mkt/runtime/logger";
import { eventNames } from "@mkt/runtime/nats";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { LeaseRecall, LeaseRecallAck, LeaseResource } from "@mkt/proto/billing/v1/leases";
import { startTestBilling, type TestBilling } from "../../services/billing/test/billing-harness.ts";
import { LeaseTable, type LeaseBilling } from "../src/leases/lease-table.ts";
import { followLeaseRecalls } from "../src/leases/lease-recall.ts";
import type { Ticket } from "../src/leases/lease-admission.ts";
import { admitOnBound, admitRequest } from "../src/chat/lease-admit.ts";
import { Route } from "@mkt/proto/registry/v1/registry";

const TTL = 1_000;
// Billing's clock is fixed 10 s into a UTC minute (no window boundary mid-test); the edges'
// validity runs on their real monotonic clocks.
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
const log = createLogger("lease-table-test", "silent");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A real billing client whose calls are counted by method (an interceptor, not a mock). */
function countedBilling(port: number) {
  const calls: string[] = [];
  const counter: Interceptor = (options, nextCall) => {
    calls.push(options.method_definition.path.split("/").pop()!);
    return new InterceptingCall(nextCall(options));
  };
  const client = createClient(BillingServiceClient, `127.0.0.1:${port}`, edgeTls, { interceptors: [counter] });
  return { calls, client, billing: promiseClient(client) };
}

/**
 * A real billing client whose GrantLease replies can be held back at the client (billing has
 * answered; the edge has not seen it yet): how a slow reply races a heartbeat in production.
 */
function heldBackBilling(port: number) {
  let hold: { until: Promise<void>; arrived: () => void } | undefined;
  const holder: Interceptor = (options, nextCall) => {
    const held = options.method_definition.path.endsWith("/GrantLease") ? hold : undefined;
    return new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        if (!held) return next(metadata, listener);
        let delivered = Promise.resolve();
        next(metadata, {
          onReceiveMetadata: (md, nextMd) => nextMd(md),
          onReceiveMessage: (message, nextMessage) => {
            held.arrived();
            delivered = held.until.then(() => nextMessage(message));
          },
          onReceiveStatus: (status, nextStatus) => void held.until.then(() => delivered).then(() => nextStatus(status)),
        });
      },
    });
  };
  const client = createClient(BillingServiceClient, `127.0.0.1:${port}`, edgeTls, { interceptors: [holder] });
  clients.push(client);
  return {
    billing: promiseClient(client),
    /** Holds the next GrantLease replies until `release`; `arrived` resolves once one is held. */
    holdGrants() {
      let release!: () => void;
      let arrived!: () => void;
      const until = new Promise<void>((resolve) => (release = resolve));
      const seen = new Promise<void>((resolve) => (arrived = resolve));
      hold = { until, arrived };
      return { arrived: seen, release: () => ((hold = undefined), release()) };
    },
  };
}

/** A real billing client that loses every GrantLease reply: billing commits, the edge sees a failure. */
function lostGrantsBilling(port: number): LeaseBilling {
  const loser: Interceptor = (options, nextCall) => {
    if (!options.method_definition.path.endsWith("/GrantLease")) return new InterceptingCall(nextCall(options));
    return new InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        next(metadata, {
          onReceiveMetadata: (md, nextMd) => nextMd(md),
          // Passed on (grpc-js holds the status until the message is through), then failed.
          onReceiveMessage: (message, nextMessage) => nextMessage(message),
          onReceiveStatus: (status, nextStatus) =>
            nextStatus({ ...status, code: grpcStatus.INTERNAL, details: "reply lost" }),
        });
      },
    });
  };
  const client = createClient(BillingServiceClient, `127.0.0.1:${port}`, edgeTls, { interceptors: [loser] });
  clients.push(client);
  return promiseClient(client);
}

let t: TestBilling;
let edgeTls: ServiceTls;
let nc: NatsConnection;
const clients: Array<{ close(): void }> = [];

function edge(billing: TestBilling = t, now?: () => number, idleMs?: number) {
  const counted = countedBilling(billing.billing.port);
  clients.push(counted.client);
  // Every heartbeat and its reply, as they crossed the wire (the real billing answers them).
  const beats: Array<{ reported: string[]; listed: string[] }> = [];
  const recorded: LeaseBilling = {
    grantLease: (...args) => counted.billing.grantLease(...args),
    returnLeases: (...args) => counted.billing.returnLeases(...args),
    async heartbeat(...args: Parameters<typeof counted.billing.heartbeat>) {
      const reply = await counted.billing.heartbeat(...args);
      beats.push({ reported: args[0].leases.map((l) => l.leaseId), listed: reply.leases.map((l) => l.leaseId) });
      return reply;
    },
  };
  return {
    ...counted,
    beats,
    table: new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing: recorded, ttlMs: TTL, log, now, idleMs }),
  };
}

/** `mkt_lease_grants_total{result="granted"}` on billing's metrics endpoint. */
async function grantsCounted(billing: TestBilling = t): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${billing.billing.metricsPort}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith('mkt_lease_grants_total{result="granted"}'));
  return Number(line?.split(" ")[1] ?? NaN);
}

beforeAll(async () => {
  edgeTls = (await testCertificates()).tls("edge");
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      MAX_REQUEST_MS: "60000",
      STARTING_CREDIT_USD: "0.01",
      TIERS: JSON.stringify({
        free: { limit_per_minute: 10, limit_per_day: 1000 },
        big: { limit_per_minute: 100_000, limit_per_day: 1_000_000 },
      }),
    },
    { clock: () => new Date(BASE) },
  );
  nc = await connect({ servers: TEST_NATS_URL });
});
afterAll(async () => {
  for (const client of clients) client.close();
  await nc?.drain();
  await t?.close();
});

/** Admits one request end to end (request, then worst case); true when admitted. */
async function admitOne(table: LeaseTable, accountId: string, tier: string, credit: bigint): Promise<Ticket | null> {
  try {
    const ticket = await table.admit({ accountId, tier, atLeast: { credit, tokens: 100n } });
    return await table.takeWorstCase(ticket, { credit, tokens: 100n, maxOutputTokens: 1n });
  } catch (err) {
    if (err instanceof AppError && (err.httpStatus === 402 || err.httpStatus === 429)) return null;
    throw err;
  }
}

/** An active subscription (inserted as billing's own tests do: its key is never issued). */
async function subscription(concurrent: number, billing: TestBilling = t) {
  const accountId = randomUUID();
  const id = randomUUID();
  await billing.query(
    `insert into subscriptions (id, account_id, idempotency_key, product_id, status, hoster_id, pricing_model,
       included_tokens, rpm_limit, tpm_limit, max_concurrent, max_output_tokens, max_context_tokens,
       period_index, period_start, period_end, activated_at, created_at)
     values ($1, $2, 'k', $3, 'active', $4, 'free', 0, 60, 100000, $5, 4096, 8192, 0, $6, $7, $6, $6)`,
    [
      id,
      accountId,
      randomUUID(),
      randomUUID(),
      concurrent,
      new Date(BASE - 86_400_000),
      new Date(BASE + 20 * 86_400_000),
    ],
  );
  return { accountId, id };
}

describe("the edge's lease table against a real billing", () => {
  it("grants a lease on a cold admit, then admits warm requests without calling billing", async () => {
    const { table, calls } = edge();
    const accountId = randomUUID();
    expect(await admitOne(table, accountId, "big", 100n)).not.toBeNull();
    expect(calls).toEqual(["GrantLease"]);
    const lease = table.leaseOf(accountId)!;
    expect(lease.credit!.granted).toBeGreaterThanOrEqual(100n);

    // A heartbeat carrying demand grows the lease; then the warm requests need no call at all.
    await table.beat();
    const before = calls.length;
    const granted = lease.credit!.granted;
    const n = Number((granted - lease.credit!.admitted) / 100n);
    for (let i = 0; i < Math.min(n, 5); i++) expect(await admitOne(table, accountId, "big", 100n)).not.toBeNull();
    expect(calls.length).toBe(before);
  });

  it("admits on a prompt's byte bound from memory only, and only where the bound changes nothing", async () => {
    const { table, calls } = edge();
    const accountId = randomUUID();
    // A first request dear enough that the beat's demand (over half a TTL at least) lends the
    // lease room for the three below.
    expect(await admitOne(table, accountId, "big", 1_000n)).not.toBeNull();
    await table.beat();
    const route = Route.fromPartial({
      modelId: "m",
      provider: "platform",
      contextWindow: 1_000n,
      maxOutputTokensCap: 100n,
      inputPricePer1mMicros: 1_000_000n,
      outputPricePer1mMicros: 1_000_000n,
    });
    const need = { accountId, tier: "big", subscriptionId: "", keyId: "", routes: [route], requested: 0n, choices: 1n };
    const held = () => table.leaseOf(accountId)!.credit!.admitted;
    const callsBefore = calls.length;

    // The bound leaves the model's whole output cap in the context: the worst case on the bound
    // (200 prompt + 100 output tokens at 1 $/1M each) is taken from memory, the cap unchanged.
    let before = held();
    const first = await admitRequest(table, need);
    const admitted = admitOnBound(table, first, need, 200n);
    expect(admitted?.ticket.maxOutputTokens).toBe(100n);
    expect(held() - before).toBe(300n);
    table.release(admitted!.ticket);

    // A bound past the context's room for the cap would shrink the cap: nothing is taken.
    const second = await admitRequest(table, need);
    before = held();
    expect(admitOnBound(table, second, need, 950n)).toBeUndefined();
    // max_tokens above the cap is lowered to it, as the count's path lowers it.
    const lowered = admitOnBound(table, second, { ...need, requested: 101n }, 10n);
    expect(lowered?.ticket.maxOutputTokens).toBe(100n);
    expect(held() - before).toBe(110n);
    table.release(lowered!.ticket);
    before = held();
    // A worst case the lease cannot cover from memory: nothing taken, billing not asked for it.
    const dear = { ...need, routes: [{ ...route, inputPricePer1mMicros: 1_000_000_000_000n }] };
    expect(admitOnBound(table, second, dear, 200n)).toBeUndefined();
    expect(held()).toBe(before);
    table.release(second);
    expect(calls.length).toBe(callsBefore);
  });

  it("never admits more than rpm in a minute over two edges sharing one billing", async () => {
    const a = edge();
    const b = edge();
    const accountId = randomUUID();
    const attempts = Array.from({ length: 20 }, (_, i) => admitOne((i % 2 ? a : b).table, accountId, "free", 10n));
    const admitted = (await Promise.all(attempts)).filter((x) => x !== null);
    expect(admitted.length).toBe(10);
    const [row] = await t.query<{ count: string }>(
      `select count from rate_counters where account_id = $1 and "window" = 'minute'`,
      [accountId],
    );
    expect(BigInt(row!.count)).toBeLessThanOrEqual(10n);
  });

  it("never admits more than a 0.01 USD balance over two edges", async () => {
    const a = edge();
    const b = edge();
    const accountId = randomUUID();
    // 3,000 µ$ worst case each: at most three fit in 10,000 µ$.
    const attempts = Array.from({ length: 12 }, (_, i) => admitOne((i % 2 ? a : b).table, accountId, "big", 3_000n));
    const admitted = (await Promise.all(attempts)).filter((x) => x !== null);
    expect(admitted.length).toBe(3);
    const held = (table: LeaseTable) => table.leaseOf(accountId)?.credit?.admitted ?? 0n;
    expect(held(a.table) + held(b.table)).toBe(9_000n);
    const balance = await t.client.getBalance({ accountId });
    expect(balance.creditBalanceMicros).toBeGreaterThanOrEqual(0n);
  });

  it("keeps a cached 402 one TTL at most: a top-up serves the account with no heartbeat reply", async () => {
    let clock = 0;
    const { table, calls } = edge(t, () => clock);
    const accountId = randomUUID();
    // 0.01 USD: three requests of 3,000 µ$ fit, the fourth is refused by billing and then here.
    for (let i = 0; i < 3; i++) expect(await admitOne(table, accountId, "big", 3_000n)).not.toBeNull();
    expect(await admitOne(table, accountId, "big", 3_000n)).toBeNull();
    const calling = calls.length;
    expect(await admitOne(table, accountId, "big", 3_000n)).toBeNull();
    expect(calls.length).toBe(calling);
    // A top-up while no heartbeat gets through (a busy billing): within the TTL the edge still
    // answers from its cache, past it the next request asks billing and is served.
    await t.client.addCredits({ accountId, amountMicros: 10_000n, idempotencyKey: randomUUID() });
    clock += TTL - 1;
    expect(await admitOne(table, accountId, "big", 3_000n)).toBeNull();
    clock += 2;
    expect(await admitOne(table, accountId, "big", 3_000n)).not.toBeNull();
    expect(calls.slice(calling)).toContain("GrantLease");
  });

  it("admits on a lease that lapsed while a heartbeat is on the way once its reply renews it, with no grant", async () => {
    let clock = 0;
    const { table, calls } = edge(t, () => clock);
    const accountId = randomUUID();
    expect(await admitOne(table, accountId, "big", 100n)).not.toBeNull();
    await table.beat();
    // Past its validity by the edge's clock (a reply came late): the beat now on the way reports
    // it lapsed, and billing, whose session is live, renews it.
    clock += TTL;
    expect(table.leaseOf(accountId)!.usable(clock)).toBe(false);
    const callsBefore = calls.length;
    const beating = table.beat();
    const admitted = await admitOne(table, accountId, "big", 100n);
    await beating;
    expect(admitted).not.toBeNull();
    expect(calls.slice(callsBefore)).toEqual(["Heartbeat"]);
  });

  it("takes a subscription's slot first and gives it back on release", async () => {
    const { table, calls } = edge();
    const sub = await subscription(1);
    const first = await table.admit({ accountId: sub.accountId, tier: "big", subscriptionId: sub.id });
    expect(first.slot).toBeDefined();
    // max_concurrent 1: a second request is refused while the first runs ...
    await expect(table.admit({ accountId: sub.accountId, tier: "big", subscriptionId: sub.id })).rejects.toMatchObject({
      code: "concurrency_limit_exceeded",
    });
    // ... and, refused once, is refused here (no billing call) until the next heartbeat reply.
    const calling = calls.length;
    await expect(table.admit({ accountId: sub.accountId, tier: "big", subscriptionId: sub.id })).rejects.toMatchObject({
      code: "concurrency_limit_exceeded",
    });
    expect(calls.length).toBe(calling);
    // A heartbeat reply applied while the request runs keeps the slot's room the same object, so
    // the release reaches the room the next request takes from.
    await table.beat();
    table.release(first);
    const slots = table
      .leaseOf(sub.accountId)!
      .budgets.get(sub.id)!
      .rooms.find((r) => r.allowanceId === first.slot!.allowanceId)!;
    expect(slots.admitted).toBe(0n);
    await table.beat();
    const second = await table.admit({ accountId: sub.accountId, tier: "big", subscriptionId: sub.id });
    expect(second.slot).toBeDefined();
  });

  it("asks billing past a cached slots 429 once the call holding the slot ended on a retired lease", async () => {
    const { table, calls } = edge();
    const sub = await subscription(1);
    const scope = { accountId: sub.accountId, tier: "big", subscriptionId: sub.id };
    const first = await table.admit(scope);
    // Recalled while its call runs: retired, and billing still counts the call's slot.
    table.recall(first.lease.leaseId, "");
    await expect(table.admit(scope)).rejects.toMatchObject({ code: "concurrency_limit_exceeded" });
    // The call ends on the retired lease before any heartbeat: the cached 429 is stale, and the
    // next request reports the end, then is granted the slot (it was refused from the cache before).
    table.release(first);
    const calling = calls.length;
    const second = await table.admit(scope);
    expect(second.slot).toBeDefined();
    expect(calls.slice(calling)).toEqual(["ReturnLeases", "GrantLease"]);
  });

  it("an older process under the edge's id drops its leases as soon as billing starts a newer one", async () => {
    const edgeId = `edge-${randomUUID()}`;
    const process = () => {
      const counted = countedBilling(t.billing.port);
      clients.push(counted.client);
      return new LeaseTable({ edgeId, billing: counted.billing, ttlMs: TTL, log });
    };
    const older = process();
    const stop = followLeaseRecalls(nc, eventNames(t.config.EVENTS_PREFIX).leaseRecall(edgeId), older, log);
    await nc.flush();
    try {
      const accountId = randomUUID();
      expect(await admitOne(older, accountId, "big", 100n)).not.toBeNull();
      // A second process under the same id (a rolling restart gone wrong): its first call takes the
      // next incarnation, and billing closes the older one's leases and says so on the recall subject.
      await process().beat();
      const until = Date.now() + 2_000;
      while (!older.superseded && Date.now() < until) await sleep(10);
      expect(older.superseded).toBe(true);
      // It admits nothing more, though its lease's validity has not run out.
      await expect(admitOne(older, accountId, "big", 100n)).rejects.toMatchObject({ httpStatus: 503 });
    } finally {
      stop();
    }
  });

  it("drops a recalled lease and acks with its final totals", async () => {
    const { table, calls } = edge();
    const stop = followLeaseRecalls(nc, eventNames(t.config.EVENTS_PREFIX).leaseRecall(table.edgeId), table, log);
    await nc.flush();
    try {
      const accountId = randomUUID();
      await admitOne(table, accountId, "big", 700n);
      const lease = table.leaseOf(accountId)!;
      const reply = await nc.request(
        eventNames(t.config.EVENTS_PREFIX).leaseRecall(table.edgeId),
        LeaseRecall.encode(LeaseRecall.fromPartial({ leaseId: lease.leaseId })).finish(),
        { timeout: 2_000 },
      );
      const ack = LeaseRecallAck.decode(reply.data);
      expect(ack).toMatchObject({ edgeId: table.edgeId, known: true });
      expect(ack.report!.final).toBe(true);
      expect(ack.report!.admitted).toContainEqual({ allowanceId: lease.credit!.allowanceId, admitted: 700n });
      expect(table.leaseOf(accountId)).toBeUndefined();
      // The next request is cold again: a new lease beside the recalled one.
      const grants = calls.filter((c) => c === "GrantLease").length;
      await admitOne(table, accountId, "big", 700n);
      expect(calls.filter((c) => c === "GrantLease").length).toBe(grants + 1);
    } finally {
      stop();
    }
  });

  it("moves a request whose lease is recalled between its two steps to the account's next lease", async () => {
    const { table } = edge();
    const accountId = randomUUID();
    const ticket = await table.admit({ accountId, tier: "big" });
    const first = ticket.lease;
    // A recall as the listener runs it; its final report reaches billing (here in the heartbeat).
    table.recall(first.leaseId, "");
    await table.beat();
    const taken = await table.takeWorstCase(ticket, { credit: 500n, tokens: 100n, maxOutputTokens: 1n });
    const next = table.leaseOf(accountId)!;
    expect(next.leaseId).not.toBe(first.leaseId);
    expect(taken.lease).toBe(next);
    expect(next.credit!.admitted).toBe(500n);
    expect([first.inFlight, next.inFlight]).toEqual([0, 1]);
    // The request itself stays counted once: on the recalled lease, whose final report had it.
    const requests = (lease: typeof first) => lease.rooms.reduce((sum, r) => sum + r.admitted, 0n);
    expect(requests(next)).toBe(0n);
    expect(requests(first)).toBeGreaterThan(0n);
    table.release(taken);
    expect(next.inFlight).toBe(0);
  });

  it("starts a subscription's request again on the next lease when its lease is recalled between the steps", async () => {
    const { table } = edge();
    const sub = await subscription(2);
    const ticket = await table.admit({ accountId: sub.accountId, tier: "big", subscriptionId: sub.id });
    const first = ticket.lease;
    table.recall(first.leaseId, "");
    await table.beat();
    const taken = await table.takeWorstCase(ticket, { credit: 0n, tokens: 50n, maxOutputTokens: 10n });
    expect(taken).not.toBe(ticket);
    expect(ticket.released).toBe(true);
    expect(taken.lease).toBe(table.leaseOf(sub.accountId));
    expect(taken.lease.leaseId).not.toBe(first.leaseId);
    expect(taken.slot!.admitted).toBe(1n);
    table.release(taken);
    expect(taken.slot!.admitted).toBe(0n);
  });

  it("never admits again on a lease it reported final, whatever an older grant reply says", async () => {
    // A grant billing answers before the edge's final report of the same lease, whose reply
    // reaches the edge after that report went: billing closes the lease on the report and holds
    // only what it counted, so a request admitted on it afterwards would be held by nothing.
    const { billing, holdGrants } = heldBackBilling(t.billing.port);
    const table = new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing, ttlMs: TTL, log });
    const accountId = randomUUID();
    table.release((await admitOne(table, accountId, "big", 100n))!);
    const first = table.leaseOf(accountId)!;
    const ticket = await table.admit({ accountId, tier: "big" });
    const held = holdGrants();
    const spare = first.spare(first.credit!);
    const taking = table.takeWorstCase(ticket, { credit: spare + 100n, tokens: 100n, maxOutputTokens: 1n });
    await held.arrived;
    table.recall(first.leaseId, "");
    await table.beat(); // the final report reaches billing, which closes the lease
    held.release();
    const taken = await taking;
    expect(taken.lease.leaseId).not.toBe(first.leaseId);
    const statusOf = async (id: string) =>
      (await t.query<{ status: string }>(`select status from leases where id = $1`, [id]))[0]!.status;
    expect(await statusOf(first.leaseId)).toBe("closed");
    expect(await statusOf(taken.lease.leaseId)).toBe("open");
    table.release(taken);
  });

  it("stops admitting once another process took its EDGE_ID", async () => {
    const old = edge();
    const accountId = randomUUID();
    const ticket = (await admitOne(old.table, accountId, "big", 100n))!;
    // A second process under the same id: its heartbeat at start takes the next incarnation, which
    // closes the first one's lease in billing.
    const next = new LeaseTable({ edgeId: old.table.edgeId, billing: edge().billing, ttlMs: TTL, log });
    await next.beat();
    const [row] = await t.query<{ status: string; held: string }>(
      `select status, held_micros::text as held from leases where id = $1`,
      [ticket.lease.leaseId],
    );
    expect(row).toEqual({ status: "closed", held: "0" });
    // A recall of the old process's lease reaches the new one (same subject): acked as unknown.
    const subject = eventNames(t.config.EVENTS_PREFIX).leaseRecall(next.edgeId);
    const stop = followLeaseRecalls(nc, subject, next, log);
    await nc.flush();
    try {
      const reply = await nc.request(
        subject,
        LeaseRecall.encode(LeaseRecall.fromPartial({ leaseId: ticket.lease.leaseId })).finish(),
        { timeout: 2_000 },
      );
      expect(LeaseRecallAck.decode(reply.data)).toMatchObject({ edgeId: next.edgeId, known: false });
    } finally {
      stop();
    }
    // The old process learns it at its next call, and admits nothing more, not even from memory.
    old.table.release(ticket);
    await old.table.beat();
    expect(old.table.superseded).toBe(true);
    expect(old.table.leaseOf(accountId)).toBeUndefined();
    await expect(old.table.admit({ accountId, tier: "big" })).rejects.toMatchObject({
      code: "service_unavailable",
      httpStatus: 503,
    });
    // The new one is served.
    expect(await admitOne(next, accountId, "big", 100n)).not.toBeNull();
  });

  it("extends an idle lease by the session alone, shrinks its credit to one request, admits warm, returns it after LEASE_IDLE_MS", async () => {
    let clock = 0;
    const idleMs = 6 * TTL;
    const { table, calls, beats } = edge(t, () => clock, idleMs);
    const accountId = randomUUID();
    // A burst lends the lease room for several requests ahead of demand.
    for (let i = 0; i < 5; i++) table.release((await admitOne(table, accountId, "big", 100n))!);
    const lease = table.leaseOf(accountId)!;
    await table.beat();
    expect(beats.at(-1)!.reported).toEqual([lease.leaseId]);
    expect(lease.spare(lease.credit!)).toBeGreaterThan(100n);
    const heldOf = async () =>
      BigInt(
        (
          await t.query<{ held: string }>(`select held_micros::text as held from leases where id = $1`, [lease.leaseId])
        )[0]!.held,
      );
    // Idle for 2 TTL: one report gives back the credit beyond one request's worst case (nothing
    // settled here, so billing holds the 500 admitted and the 100 kept).
    const counted = beats.length;
    for (let i = 1; i <= 5; i++) {
      clock = (i * TTL) / 2;
      await table.beat();
    }
    const shrinking = beats.slice(counted).filter((b) => b.reported.length > 0);
    expect(shrinking).toEqual([{ reported: [lease.leaseId], listed: [lease.leaseId] }]);
    expect(lease.spare(lease.credit!)).toBe(100n);
    expect(await heldOf()).toBe(600n);
    // Then nothing of it goes to billing, nor comes back, beat after beat; it stays valid.
    const quiet = beats.length;
    for (let i = 0; i < 4; i++) {
      clock += TTL / 2;
      await table.beat();
    }
    expect(beats.slice(quiet)).toEqual(Array.from({ length: 4 }, () => ({ reported: [], listed: [] })));
    expect(lease.usable(clock)).toBe(true);
    const grants = calls.filter((c) => c === "GrantLease").length;
    const warm = await admitOne(table, accountId, "big", 100n);
    expect(warm?.lease).toBe(lease);
    expect(calls.filter((c) => c === "GrantLease").length).toBe(grants);
    table.release(warm!);
    // LEASE_IDLE_MS after its last request it goes back with its final totals.
    const admittedAt = clock;
    while (clock - admittedAt <= idleMs) {
      clock += TTL / 2;
      await table.beat();
    }
    await table.beat(); // the reply that says it closed
    expect(table.leaseOf(accountId)).toBeUndefined();
    const [row] = await t.query<{ status: string }>(`select status from leases where id = $1`, [lease.leaseId]);
    expect(row!.status).toBe("closed");
    expect(await heldOf()).toBe(600n); // admitted, not settled here: held until it settles
  });

  it("makes one GrantLease for a burst of cold requests of one account, and admits them all", async () => {
    const { table, calls } = edge();
    const accountId = randomUUID();
    const before = await grantsCounted();
    const tickets = await Promise.all(Array.from({ length: 12 }, () => admitOne(table, accountId, "big", 100n)));
    expect(tickets.every((ticket) => ticket !== null)).toBe(true);
    expect(calls.filter((c) => c === "GrantLease")).toHaveLength(1);
    expect((await grantsCounted()) - before).toBe(1);
    expect(new Set(tickets.map((ticket) => ticket!.lease)).size).toBe(1);
  });

  it("answers a refused burst request by request: the balance pays some of them", async () => {
    const { table } = edge();
    const accountId = randomUUID();
    // 0.01 USD pays three requests of 3,000 µ$, not the eight asked together.
    const tickets = await Promise.all(Array.from({ length: 8 }, () => admitOne(table, accountId, "big", 3_000n)));
    expect(tickets.filter((ticket) => ticket !== null)).toHaveLength(3);
  });

  it("gives back a lease billing opened for a grant whose reply was lost", async () => {
    const table = new LeaseTable({
      edgeId: `edge-${randomUUID()}`,
      billing: lostGrantsBilling(t.billing.port),
      ttlMs: TTL,
      log,
    });
    const accountId = randomUUID();
    await expect(admitOne(table, accountId, "big", 100n)).rejects.toMatchObject({ httpStatus: 503 });
    const statusOf = async () =>
      (await t.query<{ status: string }>(`select status from leases where account_id = $1`, [accountId])).map(
        (row) => row.status,
      );
    expect(await statusOf()).toEqual(["open"]);
    // The next heartbeat names the account; billing lists the lease, which the edge reports final.
    await table.beat();
    await table.beat();
    expect(await statusOf()).toEqual(["closed"]);
  });

  it("names an account whose grant it gave up on until that grant can no longer commit, and gives its lease back", async () => {
    // The grant is held on the way to billing and fails at the edge (its deadline): it reaches
    // billing, and commits, only after the edge's next heartbeat named the account.
    let clock = 0;
    const counted = countedBilling(t.billing.port);
    clients.push(counted.client);
    const late: Array<Parameters<LeaseBilling["grantLease"]>[0]> = [];
    const billing: LeaseBilling = {
      grantLease: async (request) => {
        late.push(request);
        throw Object.assign(new Error("deadline exceeded"), {
          code: grpcStatus.DEADLINE_EXCEEDED,
          details: "Deadline exceeded",
        });
      },
      returnLeases: (...args) => counted.billing.returnLeases(...args),
      heartbeat: (...args) => counted.billing.heartbeat(...args),
    };
    const table = new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing, ttlMs: TTL, log, now: () => clock });
    const accountId = randomUUID();
    await expect(admitOne(table, accountId, "big", 100n)).rejects.toMatchObject({ httpStatus: 503 });
    clock += 100;
    await table.beat(); // names the account: billing has no lease of it yet
    await counted.billing.grantLease(late[0]!, { timeoutMs: 5_000 });
    const statusOf = async () =>
      (await t.query<{ status: string }>(`select status from leases where account_id = $1`, [accountId])).map(
        (row) => row.status,
      );
    expect(await statusOf()).toEqual(["open"]);
    // Beats go on naming it until one is sent past the grant's deadline and a TTL: billing lists
    // the lease, and the edge reports it final.
    for (let i = 0; i < 16 && (await statusOf())[0] === "open"; i++) {
      clock += TTL / 2;
      await table.beat();
    }
    expect(await statusOf()).toEqual(["closed"]);
  });

  it("heartbeats keep a lease valid past one TTL, and returnAll closes it", async () => {
    const { table, calls } = edge();
    const accountId = randomUUID();
    await admitOne(table, accountId, "big", 100n);
    for (let i = 0; i < 4; i++) {
      await sleep(TTL / 2);
      await admitOne(table, accountId, "big", 100n); // keeps it busy (not idle)
      await table.beat();
    }
    expect(calls.filter((c) => c === "GrantLease").length).toBe(1);
    expect(table.leaseOf(accountId)!.usable(performance.now())).toBe(true);
    await table.returnAll();
    const [row] = await t.query<{ status: string }>(`select status from leases where edge_id = $1`, [table.edgeId]);
    expect(row!.status).toBe("closed");
  });

  it("admits a request arriving between two minutes' rooms on the next minute's, after one grant, cold or warm", async () => {
    // A 10 s TTL makes the margin 1 s, so the gap between the rooms is plain: the current
    // minute's room ends 1 s before billing's boundary on the edge, the next one's starts 1 s after.
    const ttlMs = 10_000;
    const boundary = Date.UTC(2030, 0, 7, 12, 1, 0);
    let billingNow = boundary - 50;
    const gap = await startTestBilling(
      { LEASE_TTL_MS: String(ttlMs), TIERS: JSON.stringify({ free: { limit_per_minute: 100, limit_per_day: 1e6 } }) },
      { clock: () => new Date(billingNow) },
    );
    let skew = 0;
    const counted = countedBilling(gap.billing.port);
    clients.push(counted.client);
    const table = new LeaseTable({
      edgeId: `edge-${randomUUID()}`,
      billing: counted.billing,
      ttlMs,
      log,
      now: () => performance.now() + skew,
    });
    const grants = () => counted.calls.filter((c) => c === "GrantLease").length;
    try {
      // Cold: the grant's current room is already past its validity on the edge.
      const startedAt = performance.now();
      expect(await admitOne(table, randomUUID(), "free", 10n)).not.toBeNull();
      expect(performance.now() - startedAt).toBeGreaterThanOrEqual(900);
      expect(grants()).toBe(1);

      // Warm, with no demand since the last heartbeat: the grant still brings the next room.
      const accountId = randomUUID();
      billingNow = boundary + 10_000;
      expect(await admitOne(table, accountId, "free", 10n)).not.toBeNull();
      await table.beat();
      billingNow = boundary + 60_000 - 50;
      skew += ttlMs; // the lease lapsed on the edge: the next request must ask billing
      const before = grants();
      expect(await admitOne(table, accountId, "free", 10n)).not.toBeNull();
      expect(grants() - before).toBe(1);

      // A subscription's budget the same way: its own minute's room comes with the request.
      const sub = await subscription(5, gap);
      const onSub = { accountId: sub.accountId, tier: "free", subscriptionId: sub.id };
      billingNow = boundary + 120_000 + 10_000;
      table.release(await table.admit(onSub));
      await table.beat();
      billingNow = boundary + 180_000 - 50;
      skew += ttlMs;
      const subBefore = grants();
      table.release(await table.admit(onSub));
      expect(grants() - subBefore).toBe(1);
    } finally {
      await gap.close();
    }
  });

  it("asks for the next minute's room ahead of other reports when its minute ends within 2 TTL and a beat is full", async () => {
    // Billing's clock 1.5 s before a minute's end: a grant brings the current minute's room only
    // (the next one comes within one TTL of the boundary, or with a report sent ahead for it).
    const boundary = Date.UTC(2030, 0, 7, 12, 1, 0);
    const near = await startTestBilling(
      { LEASE_TTL_MS: String(TTL), TIERS: JSON.stringify({ free: { limit_per_minute: 100, limit_per_day: 1e6 } }) },
      { clock: () => new Date(boundary - 1_500) },
    );
    const counted = countedBilling(near.billing.port);
    clients.push(counted.client);
    const reported: string[][] = [];
    let skew = 0;
    const table = new LeaseTable({
      edgeId: `edge-${randomUUID()}`,
      billing: {
        grantLease: (...args) => counted.billing.grantLease(...args),
        returnLeases: (...args) => counted.billing.returnLeases(...args),
        heartbeat: async (...args: Parameters<typeof counted.billing.heartbeat>) => {
          reported.push(args[0].leases.map((l) => l.leaseId));
          return counted.billing.heartbeat(...args);
        },
      },
      ttlMs: TTL,
      idleMs: 300,
      log,
      now: () => performance.now() + skew,
      maxReportsPerBeat: 2,
    });
    try {
      // One account with a request in flight (never idle), then two whose leases go idle: in the
      // next beat those two are final reports, as urgent as a report gets.
      const closing = randomUUID();
      const inFlight = (await admitOne(table, closing, "free", 10n))!;
      for (let i = 0; i < 2; i++) table.release((await admitOne(table, randomUUID(), "free", 10n))!);
      const lease = table.leaseOf(closing)!;
      const perMinute = () =>
        lease.rooms.filter((r) => r.resource === LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE);
      expect(perMinute()).toHaveLength(1);
      // 700 ms on: the closing account's minute ends within 2 TTL on the edge (its lease is still
      // valid), the others are idle. Three reports are due and the beat carries two.
      skew += 700;
      expect(lease.usable(performance.now() + skew)).toBe(true);
      await table.beat();
      expect(reported.at(-1)).toHaveLength(2);
      expect(reported.at(-1)).toContain(lease.leaseId);
      expect(perMinute()).toHaveLength(2);
      table.release(inFlight);
    } finally {
      await near.close();
    }
  });

  it("ends the heartbeats' backoff once billing answers a grant: they renew its session from the next beat", async () => {
    // Billing unreachable, then back: every call fails while `unreachable`, as a lost connection does.
    let unreachable = false;
    let beats = 0;
    const lost = () => Object.assign(new Error("14 UNAVAILABLE: connection refused"), { code: grpcStatus.UNAVAILABLE });
    const counted = countedBilling(t.billing.port);
    clients.push(counted.client);
    const billing: LeaseBilling = {
      grantLease: (...args) => (unreachable ? Promise.reject(lost()) : counted.billing.grantLease(...args)),
      returnLeases: (...args) => (unreachable ? Promise.reject(lost()) : counted.billing.returnLeases(...args)),
      heartbeat: (...args) => {
        beats += 1;
        return unreachable ? Promise.reject(lost()) : counted.billing.heartbeat(...args);
      },
    };
    // The edge's clock stands still: the backoff (TTL / 4 at least) never runs out by itself.
    const table = new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing, ttlMs: TTL, log, now: () => 0 });
    const accountId = randomUUID();
    expect(await admitOne(table, accountId, "big", 10n)).not.toBeNull();
    unreachable = true;
    await table.beat(); // fails: the heartbeats back off
    unreachable = false;
    await table.beat(); // still backing off: not sent
    expect(beats).toBe(1);
    // A grant answered: billing is back. The heartbeats no longer wait out their backoff, which
    // left the session the grant renewed to lapse a TTL later, fencing every lease of the edge.
    expect(await admitOne(table, randomUUID(), "big", 10n)).not.toBeNull();
    await table.beat();
    expect(beats).toBe(2);
  });

  it("with billing stopped admits until the lease lapses, then answers 503 with retry-after", async () => {
    const down = await startTestBilling(
      { LEASE_TTL_MS: String(TTL), TIERS: JSON.stringify({ free: { limit_per_minute: 100_000, limit_per_day: 1e6 } }) },
      { clock: () => new Date(BASE) },
    );
    // The edge's clock stands still while billing shuts down (which takes real time), so the
    // test sees exactly where validity ends: send time + TTL − TTL/10.
    let clock = 0;
    const { table } = edge(down, () => clock);
    const accountId = randomUUID();
    try {
      await admitOne(table, accountId, "big", 10n);
      await down.billing.close();
      clock = TTL / 2;
      await table.beat(); // fails and backs off; the lease stays valid until its own deadline
      expect(await admitOne(table, accountId, "big", 10n)).not.toBeNull();
      clock = TTL - table.marginMs;
      const refused = await table.admit({ accountId, tier: "big" }).catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(AppError);
      expect((refused as AppError).httpStatus).toBe(503);
      expect((refused as AppError).headers["retry-after"]).toBe("1");
    } finally {
      await down.close().catch(() => undefined);
    }
  });
});
