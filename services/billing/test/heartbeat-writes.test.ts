import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseResource, type LeaseNeed, type LeaseReport, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { createLogger } from "@mkt/runtime/logger";
import { startBilling } from "../src/server.ts";
import { startTestBilling, waitFor, type TestBilling } from "./billing-harness.ts";

// What a heartbeat writes, read from PostgreSQL's own counters of this test's database: each row
// it changes gets one new version, and none of them touches an index (a HOT update).
const TTL = 2_000;
// A fixed clock 10 s into a UTC minute: the beat grows the rooms of the windows the grant opened.
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
let offsetMs = 0;
const OPTIONS = { clock: () => new Date(BASE + offsetMs), leaseCloserIntervalMs: 3_600_000, leaseCloserAtStart: false };
const TABLES = ["leases", "lease_allowances", "wallets", "rate_counters"] as const;
let t: TestBilling;

beforeAll(async () => {
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      TIERS: JSON.stringify({ free: { limit_per_minute: 1000, limit_per_day: 100000 } }),
    },
    OPTIONS,
  );
});
afterAll(async () => {
  await t?.close();
});

const need = (credit: bigint, requests: bigint): LeaseNeed => ({
  creditMicros: credit,
  requests,
  tokens: 0n,
  subscriptionId: "",
  keyId: "",
});

type Counts = Record<(typeof TABLES)[number], { updated: number; hot: number }>;

async function readCounts(): Promise<Counts> {
  // A fresh snapshot of the statistics each time (they are cached per transaction otherwise).
  await t.query(`select pg_stat_clear_snapshot()`);
  const rows = await t.query<{ relname: (typeof TABLES)[number]; updated: string; hot: string }>(
    `select relname, n_tup_upd as updated, n_tup_hot_upd as hot from pg_stat_user_tables
     where schemaname = 'billing' and relname = any($1)`,
    [TABLES],
  );
  return Object.fromEntries(rows.map((r) => [r.relname, { updated: Number(r.updated), hot: Number(r.hot) }])) as Counts;
}

/**
 * The counts once billing's backends have reported what they wrote. An idle backend reports them
 * only every few seconds, and when it exits, before it leaves pg_stat_activity: billing is
 * restarted (on the same port, for the harness's client) and its old backends awaited.
 */
async function settledCounts(): Promise<Counts> {
  const backends = await t.query<{ pid: number }>(
    `select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`,
  );
  const port = t.billing.port;
  await t.billing.close();
  await waitFor(
    () =>
      t.query<{ n: string }>(`select count(*) as n from pg_stat_activity where pid = any($1)`, [
        backends.map((b) => b.pid),
      ]),
    ([row]) => row!.n === "0",
    10_000,
  );
  t.billing = await startBilling(
    { ...t.config, GRPC_PORT: port },
    createLogger("billing-test", process.env.TEST_LOG_LEVEL ?? "silent"),
    OPTIONS,
  );
  return readCounts();
}

/**
 * A call made once the harness's client has reconnected to the restarted billing: until then it
 * fails with the connection refused, before anything was sent, so it is sent again.
 */
async function once<R>(call: () => Promise<R>): Promise<R> {
  for (let tries = 0; ; tries++) {
    try {
      return await call();
    } catch (err) {
      const refused = String((err as { cause?: { details?: string } }).cause?.details).includes("ECONNREFUSED");
      if (tries > 50 || !refused) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

/** The lease's report with one more request (and `credit` of its worst case) admitted on each room. */
function admitOne(lease: LeaseState, credit: bigint): LeaseReport {
  const rooms = lease.rooms.filter((r) => r.startsInMs === 0n);
  return {
    leaseId: lease.leaseId,
    admitted: [
      { allowanceId: lease.credit!.allowanceId, admitted: credit },
      ...rooms.map((room) => ({ allowanceId: room.allowanceId, admitted: 1n })),
    ],
    final: false,
    demandPerSecond: need(credit, 1n),
    budgetDemand: [],
    slotsPinned: true,
    nextWindow: false,
  };
}

describe("heartbeat writes", () => {
  it("a beat that applies a report and grows the lease writes each row once, every update HOT", async () => {
    const edgeId = `edge_${randomUUID()}`;
    const bootId = randomUUID();
    let sequence = 0n;
    const leases: LeaseState[] = [];
    let incarnation = 0n;
    for (let i = 0; i < 4; i++) {
      const reply = await t.client.grantLease({
        edgeId,
        bootId,
        incarnation,
        sequence: ++sequence,
        accountId: randomUUID(),
        tier: "free",
        minCreditMicros: 0n,
        request: need(1_000n, 1n),
      });
      incarnation = reply.incarnation;
      leases.push(reply.lease!);
    }
    // Credit, the minute's requests and the day's: three allowances per lease.
    for (const lease of leases) expect(lease.rooms.filter((r) => r.startsInMs === 0n)).toHaveLength(2);
    const before = await settledCounts();
    // Half a beat later: the beat sets each lease's last use to a time of its own.
    offsetMs += TTL / 2;

    const beat = await once(() =>
      t.client.heartbeat({
        edgeId,
        bootId,
        incarnation,
        sequence: ++sequence,
        leases: leases.map((lease) => admitOne(lease, 1_000n)),
        unansweredGrantAccounts: [],
      }),
    );
    const after = await settledCounts();

    // Every lease was applied and grown: its credit and both windows' rooms are larger.
    for (const state of beat.leases) {
      expect(state.appliedSequence).toBe(sequence);
      expect(state.credit!.granted).toBeGreaterThan(1_000n);
      const minute = state.rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE)!;
      expect(minute.granted).toBeGreaterThan(1n);
    }
    // The stored rows are the reply's: admitted as reported, granted as grown.
    const stored = await t.query<{ id: string; admitted: string; granted: string }>(
      `select id, admitted::text, granted::text from lease_allowances where lease_id = any($1)`,
      [leases.map((l) => l.leaseId)],
    );
    const granted = new Map(beat.leases.flatMap((s) => [s.credit!, ...s.rooms]).map((r) => [r.allowanceId, r.granted]));
    for (const row of stored) expect(BigInt(row.granted)).toBe(granted.get(row.id));
    expect(new Set(stored.map((r) => r.admitted))).toEqual(new Set(["1000", "1"]));

    const delta = (table: (typeof TABLES)[number]) => ({
      updated: after[table].updated - before[table].updated,
      hot: after[table].hot - before[table].hot,
    });
    // One version of each lease (its report, sequence, last use and hold together) and of each
    // allowance (admitted and granted together); the wallet once; the two windows' counters once each.
    expect(delta("leases")).toEqual({ updated: 4, hot: 4 });
    expect(delta("lease_allowances")).toEqual({ updated: 12, hot: 12 });
    expect(delta("wallets")).toEqual({ updated: 4, hot: 4 });
    expect(delta("rate_counters")).toEqual({ updated: 8, hot: 8 });
  });

  it("leases, wallets, allowances and window counters keep room on their pages for those updates", async () => {
    const rows = await t.query<{ relname: string; reloptions: string[] | null }>(
      `select relname, reloptions from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = 'billing' and relname = any($1) order by relname`,
      [TABLES],
    );
    expect(Object.fromEntries(rows.map((r) => [r.relname, r.reloptions]))).toEqual({
      lease_allowances: ["fillfactor=80"],
      leases: ["fillfactor=70"],
      rate_counters: ["fillfactor=80"],
      wallets: ["fillfactor=80"],
    });
  });
});
