import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { LeaseStatus, type LeaseNeed, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { fenceLeases } from "../src/leases/fence-leases.ts";
import { startTestBilling, type TestBilling, openTestOrm } from "./billing-harness.ts";

const TTL = 2_000;
const MAX_REQUEST = 60_000;
/** Shorter than MAX_REQUEST, so each test shows which of the two holds a lease. */
const ISOLATION = 20_000;
// A fixed clock 10 s into a UTC minute: no window boundary unless a test moves the clock there.
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
let offsetMs = 0;
let t: TestBilling;
let orm: Orm;

beforeAll(async () => {
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      MAX_REQUEST_MS: String(MAX_REQUEST),
      EDGE_ISOLATION_MS: String(ISOLATION),
      STARTING_CREDIT_USD: "0.01",
      TIERS: JSON.stringify({ free: { limit_per_minute: 10, limit_per_day: 1000 } }),
    },
    { clock: () => new Date(BASE + offsetMs) },
  );
  orm = await openTestOrm(t, createLogger("lease-test", "silent"));
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
});

const need = (credit: bigint, requests = 1n): LeaseNeed => ({
  creditMicros: credit,
  requests,
  tokens: 0n,
  subscriptionId: "",
  keyId: "",
});
const edge = () => `edge_${randomUUID()}`;
const minuteRoom = (lease: LeaseState) => lease.rooms.find((r) => r.resource === 1 && r.startsInMs === 0n)!;

async function wallet(accountId: string) {
  const [row] = await t.query<{ posted: string; held: string }>(
    `select posted_micros as posted, held_micros as held from wallets where account_id = $1`,
    [accountId],
  );
  return { posted: BigInt(row!.posted), held: BigInt(row!.held) };
}

async function minuteCount(accountId: string) {
  const [row] = await t.query<{ count: string }>(
    `select count from rate_counters where account_id = $1 and "window" = 'minute' and window_start = $2`,
    [accountId, new Date(Math.floor((BASE + offsetMs) / 60_000) * 60_000)],
  );
  return BigInt(row?.count ?? "0");
}

/** Conservation: every wallet holds exactly its leases' holds. */
async function conservation() {
  const rows = await t.query(
    `select w.account_id from wallets w
     where w.held_micros <> coalesce((select sum(held_micros) from leases l where l.account_id = w.account_id), 0)`,
  );
  const leaseHolds = await t.query(
    `select l.id from leases l join lease_allowances a on a.lease_id = l.id and a.resource = 'credit'
     where l.released_at is null and l.held_micros <> case when l.status = 'closed'
       then a.admitted - l.settled_micros else a.granted - l.settled_micros end`,
  );
  return { wallets: rows.length, leases: leaseHolds.length };
}

/** Credit free in the wallet (posted − held): what a grant may still take. */
async function free(accountId: string): Promise<bigint> {
  const [row] = await t.query<{ free: string }>(
    `select (posted_micros - held_micros)::text as free from wallets where account_id = $1`,
    [accountId],
  );
  return BigInt(row!.free);
}

describe("admission leases", () => {
  it("grants a lease covering the request in hand and a heartbeat extends and grows it", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const { lease } = await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(1_000n),
    });
    expect(lease!.status).toBe(LeaseStatus.LEASE_STATUS_OPEN);
    expect(lease!.validForMs).toBe(BigInt(TTL));
    expect(lease!.credit!.granted).toBe(1_000n);
    expect(minuteRoom(lease!).granted).toBe(1n);
    expect(await free(accountId)).toBe(9_000n);
    // What the account is shown leaves the lease's unspent room out: nothing was admitted yet.
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(10_000n);

    offsetMs += TTL - 100;
    const beat = await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        {
          leaseId: lease!.leaseId,
          admitted: [
            { allowanceId: lease!.credit!.allowanceId, admitted: 1_000n },
            { allowanceId: minuteRoom(lease!).allowanceId, admitted: 1n },
          ],
          final: false,
          budgetDemand: [],
          nextWindow: false,
          slotsPinned: true,
          demandPerSecond: need(500n, 1n),
        },
      ],
    });
    const state = beat.leases[0]!;
    expect(state.status).toBe(LeaseStatus.LEASE_STATUS_OPEN);
    expect(state.appliedSequence).toBe(2n);
    // 1 request/s × 2 × 2 s = 4 more requests; 500 µ$/s × 4 s = 2,000 µ$ of credit.
    expect(minuteRoom(state).granted).toBe(5n);
    expect(state.credit!.granted).toBe(3_000n);
    expect(await minuteCount(accountId)).toBe(5n);
    const [session] = await t.query<{ deadline: Date }>(`select deadline from edge_sessions where edge_id = $1`, [
      edgeId,
    ]);
    expect(session!.deadline.getTime()).toBe(BASE + offsetMs + TTL);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });

  it("a grant on a live session reads its deadline, writes it only when it ends within TTL / 2, and promises no more", async () => {
    const edgeId = edge();
    const grant = (sequence: bigint) =>
      t.client.grantLease({
        edgeId,
        incarnation: 0n,
        bootId: "",
        sequence,
        accountId: randomUUID(),
        tier: "free",
        minCreditMicros: 0n,
        request: need(1_000n),
      });
    const deadline = async () =>
      (
        await t.query<{ deadline: Date }>(`select deadline from edge_sessions where edge_id = $1`, [edgeId])
      )[0]!.deadline.getTime();
    const opened = await grant(1n);
    const startedAt = BASE + offsetMs;
    expect(opened.lease!.validForMs).toBe(BigInt(TTL));
    expect(await deadline()).toBe(startedAt + TTL);

    // 300 ms on, the session still has 1,700 ms: read, not written, and the lease gets those 1,700.
    offsetMs += 300;
    const read = await grant(2n);
    expect(read.lease!.validForMs).toBe(BigInt(TTL - 300));
    expect(read.lease!.credit!.validForMs).toBe(BigInt(TTL - 300));
    expect(await deadline()).toBe(startedAt + TTL);

    // 1,500 ms on, 500 ms are left, less than TTL / 2: the grant extends the session to now + TTL.
    offsetMs += 1_200;
    const extended = await grant(3n);
    expect(extended.lease!.validForMs).toBe(BigInt(TTL));
    expect(await deadline()).toBe(BASE + offsetMs + TTL);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });

  it("ignores a report whose sequence billing has passed, and a lost reply is corrected by the next", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const { lease } = await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(100n),
    });
    const report = (admitted: bigint, final = false) => ({
      leaseId: lease!.leaseId,
      admitted: [{ allowanceId: lease!.credit!.allowanceId, admitted }],
      final,
      budgetDemand: [],
      nextWindow: false,
      slotsPinned: true,
      demandPerSecond: need(1_000n, 0n),
    });
    // The reply to sequence 3 is lost: the grant it carried stands, and is not made twice.
    const lost = await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 3n,
      leases: [report(100n)],
    });
    const grown = lost.leases[0]!.credit!.granted;
    expect(grown).toBeGreaterThan(100n);
    const heldAfterLost = (await wallet(accountId)).held;
    // A delayed sequence 2, final and with smaller totals, changes nothing.
    const stale = await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [report(50n, true)],
    });
    expect(stale.leases[0]!.status).toBe(LeaseStatus.LEASE_STATUS_OPEN);
    expect(stale.leases[0]!.appliedSequence).toBe(3n);
    const next = await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 4n,
      leases: [report(100n)],
    });
    expect(next.leases[0]!.credit!.granted).toBe(grown);
    expect(next.leases[0]!.appliedSequence).toBe(4n);
    expect((await wallet(accountId)).held).toBe(heldAfterLost);
    const [row] = await t.query<{ admitted: string }>(`select admitted from lease_allowances where id = $1`, [
      lease!.credit!.allowanceId,
    ]);
    expect(row!.admitted).toBe("100");
  });

  it("return closes the lease: holds exactly what was admitted until MAX_REQUEST_MS, then releases it", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const { lease } = await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(700n),
      demandPerSecond: need(500n, 1n),
    });
    expect(lease!.credit!.granted).toBe(2_000n);
    expect(minuteRoom(lease!).granted).toBe(4n);
    const returned = await t.client.returnLeases({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        {
          leaseId: lease!.leaseId,
          admitted: [
            { allowanceId: lease!.credit!.allowanceId, admitted: 700n },
            { allowanceId: minuteRoom(lease!).allowanceId, admitted: 1n },
          ],
          final: true,
          budgetDemand: [],
          nextWindow: false,
          slotsPinned: true,
        },
      ],
    });
    expect(returned.leases[0]!.status).toBe(LeaseStatus.LEASE_STATUS_CLOSED);
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: 700n });
    // The three requests not admitted go back to the minute.
    expect(await minuteCount(accountId)).toBe(1n);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });

    offsetMs += MAX_REQUEST - 1;
    await t.billing.closeDueLeases();
    expect((await wallet(accountId)).held).toBe(700n);
    offsetMs += 1;
    await t.billing.closeDueLeases();
    expect((await wallet(accountId)).held).toBe(0n);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });

  it("an edge that stops heartbeating keeps its room used and held until deadline + EDGE_ISOLATION_MS", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const { lease } = await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(1_000n),
      demandPerSecond: need(0n, 1n),
    });
    const deadline = BASE + offsetMs + TTL;
    expect(minuteRoom(lease!).granted).toBe(4n);
    offsetMs = deadline - BASE + ISOLATION - 1;
    await t.billing.closeDueLeases();
    expect((await wallet(accountId)).held).toBe(1_000n);
    offsetMs += 1;
    expect((await t.billing.closeDueLeases()).closed).toBeGreaterThanOrEqual(1);
    expect((await wallet(accountId)).held).toBe(0n);
    const [row] = await t.query<{ status: string }>(`select status from leases where id = $1`, [lease!.leaseId]);
    expect(row!.status).toBe("closed");
    // Never reported: its room stays used in its window.
    const [counter] = await t.query<{ count: string }>(
      `select count from rate_counters where account_id = $1 and "window" = 'minute'`,
      [accountId],
    );
    expect(counter!.count).toBe("4");
    // A late final report changes nothing; the edge is told to drop the lease.
    const late = await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        { leaseId: lease!.leaseId, admitted: [], final: true, budgetDemand: [], nextWindow: false, slotsPinned: true },
      ],
    });
    expect(late.leases[0]!.status).toBe(LeaseStatus.LEASE_STATUS_CLOSED);
    expect((await wallet(accountId)).held).toBe(0n);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });

  it("a final report after the session lapsed holds only until the lapse + MAX_REQUEST_MS (releasing at once past it)", async () => {
    // The edge could not reach billing (or billing its database) for a while: its session lapsed
    // with requests in flight, then its final report came. No request was admitted after the
    // lapse, so none runs past lapse + MAX_REQUEST_MS; holding until report + MAX_REQUEST_MS kept
    // the credit and a subscription's slots for nothing (test/faults/postgres-outage found it).
    const report = (leaseId: string, allowanceId: string) => ({
      leaseId,
      admitted: [{ allowanceId, admitted: 300n }],
      final: true,
      budgetDemand: [],
      nextWindow: false,
      slotsPinned: true,
    });
    const grant = async (accountId: string, edgeId: string) =>
      (
        await t.client.grantLease({
          edgeId,
          incarnation: 0n,
          bootId: "",
          sequence: 1n,
          accountId,
          tier: "free",
          minCreditMicros: 0n,
          request: need(1_000n),
          demandPerSecond: need(0n, 1n),
        })
      ).lease!;

    // Reported 1 s after the lapse: held 300 until the lapse + MAX_REQUEST_MS, not a second longer.
    const soon = { accountId: randomUUID(), edgeId: edge() };
    const first = await grant(soon.accountId, soon.edgeId);
    const lapse = BASE + offsetMs + TTL;
    offsetMs = lapse - BASE + 1_000;
    await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId: soon.edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [report(first.leaseId, first.credit!.allowanceId)],
    });
    expect((await wallet(soon.accountId)).held).toBe(300n);
    offsetMs = lapse - BASE + MAX_REQUEST - 1;
    await t.billing.closeDueLeases();
    expect((await wallet(soon.accountId)).held).toBe(300n);
    offsetMs += 1;
    await t.billing.closeDueLeases();
    expect((await wallet(soon.accountId)).held).toBe(0n);

    // Reported past the lapse + MAX_REQUEST_MS, before the closer's pass: released at once.
    const late = { accountId: randomUUID(), edgeId: edge() };
    const second = await grant(late.accountId, late.edgeId);
    offsetMs += TTL + MAX_REQUEST + 500;
    await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId: late.edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [report(second.leaseId, second.credit!.allowanceId)],
    });
    expect((await wallet(late.accountId)).held).toBe(0n);
    const [row] = await t.query<{ released: boolean }>(
      `select released_at is not null as released from leases where id = $1`,
      [second.leaseId],
    );
    expect(row!.released).toBe(true);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });

  it("two edges on one account share its room and never get more than the limit or the balance", async () => {
    const accountId = randomUUID();
    const a = edge();
    const b = edge();
    const first = await t.client.grantLease({
      edgeId: a,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(1_000n),
    });
    const second = await t.client.grantLease({
      edgeId: b,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(1_000n),
    });
    const demand = need(100_000n, 100n);
    const report = (lease: LeaseState) => ({
      leaseId: lease.leaseId,
      admitted: [],
      final: false,
      budgetDemand: [],
      nextWindow: false,
      slotsPinned: true,
      demandPerSecond: demand,
    });
    const ga = (
      await t.client.heartbeat({
        unansweredGrantAccounts: [],
        edgeId: a,
        incarnation: 0n,
        bootId: "",
        sequence: 2n,
        leases: [report(first.lease!)],
      })
    ).leases[0]!;
    const gb = (
      await t.client.heartbeat({
        unansweredGrantAccounts: [],
        edgeId: b,
        incarnation: 0n,
        bootId: "",
        sequence: 2n,
        leases: [report(second.lease!)],
      })
    ).leases[0]!;
    // Two edges use the account: A's lease may hold half of what is free plus its own unspent
    // room ((8 + 1) / 2 = 4 requests, (8,000 + 1,000) / 2 = 4,500 µ$), then B half of the rest.
    expect(minuteRoom(ga).granted).toBe(4n);
    expect(minuteRoom(gb).granted).toBe(3n);
    expect(ga.credit!.granted).toBe(4_500n);
    expect(gb.credit!.granted).toBe(2_750n);
    expect(await minuteCount(accountId)).toBe(7n);
    // Never more granted than the limit in the window, or the balance, summed over the leases.
    const [sums] = await t.query<{ requests: string; credit: string }>(
      `select sum(a.granted) filter (where a.resource = 'requests_minute')::text as requests,
         sum(a.granted) filter (where a.resource = 'credit')::text as credit
       from lease_allowances a join leases l on l.id = a.lease_id where l.account_id = $1`,
      [accountId],
    );
    expect(BigInt(sums!.requests)).toBeLessThanOrEqual(10n);
    expect(BigInt(sums!.credit)).toBeLessThanOrEqual(10_000n);
    expect(await free(accountId)).toBe(10_000n - 7_250n);
    // A request worth more than what is free is refused, whatever another edge could give back.
    await expect(
      t.client.grantLease({
        edgeId: edge(),
        incarnation: 0n,
        bootId: "",
        sequence: 1n,
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: need(3_000n),
      }),
    ).rejects.toMatchObject({ message: expect.stringContaining("Insufficient credits") });
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });

  it("refuses a request the minute cannot hold with a 429 and retry-after", async () => {
    const accountId = randomUUID();
    await t.client.grantLease({
      edgeId: edge(),
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(0n),
      demandPerSecond: need(0n, 100n),
    });
    await expect(
      t.client.grantLease({
        edgeId: edge(),
        incarnation: 0n,
        bootId: "",
        sequence: 1n,
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: need(0n),
      }),
    ).rejects.toMatchObject({ message: expect.stringContaining("Rate limit reached: 10 requests per minute") });
  });

  it("a heartbeat racing a fence never revives the lease", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const { lease } = await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(100n),
    });
    const report = {
      leaseId: lease!.leaseId,
      admitted: [],
      final: false,
      budgetDemand: [],
      nextWindow: false,
      slotsPinned: true,
      demandPerSecond: need(1_000n, 1n),
    };
    let racing: ReturnType<typeof t.client.heartbeat> | undefined;
    const fenced = await orm.em.fork().transactional(async (em) => {
      const result = await fenceLeases(em, accountId);
      // The heartbeat waits on the wallet lock the fence holds until it commits.
      racing = t.client.heartbeat({
        unansweredGrantAccounts: [],
        edgeId,
        incarnation: 0n,
        bootId: "",
        sequence: 2n,
        leases: [report],
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      return result;
    });
    expect(fenced).toEqual([{ leaseId: lease!.leaseId, edgeId }]);
    const raced = (await racing!).leases[0]!;
    expect(raced.status).toBe(LeaseStatus.LEASE_STATUS_FENCED);
    expect(raced.validForMs).toBe(0n);
    expect(raced.credit!.granted).toBe(100n);
    offsetMs += TTL / 2;
    const later = (
      await t.client.heartbeat({
        unansweredGrantAccounts: [],
        edgeId,
        incarnation: 0n,
        bootId: "",
        sequence: 3n,
        leases: [report],
      })
    ).leases[0]!;
    expect(later.status).toBe(LeaseStatus.LEASE_STATUS_FENCED);
    const [row] = await t.query<{ deadline: Date; session: Date }>(
      `select l.deadline, s.deadline as session from leases l join edge_sessions s using (edge_id) where l.id = $1`,
      [lease!.leaseId],
    );
    expect(row!.deadline.getTime()).toBeLessThan(row!.session.getTime());
    // Only GrantLease makes a lease again: a new one beside the fenced one.
    const fresh = await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 4n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(100n),
    });
    expect(fresh.lease!.leaseId).not.toBe(lease!.leaseId);
    expect(await conservation()).toEqual({ wallets: 0, leases: 0 });
  });
});
