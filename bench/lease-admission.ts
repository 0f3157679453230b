/**
 * The edge's admission from memory (edge/src/leases/lease-table.ts), in-process, no services.
 *
 *   npx node bench/lease-admission.ts
 *
 * A LeaseTable whose billing answers at once from memory (every grant lends far more than the run
 * uses, so after each account's first grant nothing goes to billing): BENCH_ADMITS (200,000)
 * warm admissions, each both steps and the release (`admit`, `takeWorstCase`, `release`) spread
 * over BENCH_ACCOUNTS (1,000) accounts, then BENCH_BEATS (200) heartbeats over those accounts
 * with every lease changed (each beat plans, pins and reports up to the per-beat cap). What is
 * measured is the edge's own work: the stand-in billing costs a resolved promise. Each figure is
 * the median of BENCH_ROUNDS (7) rounds after a warm-up. BENCH_LEASE_TABLE names another copy of
 * lease-table.ts to measure (an earlier commit's, checked out beside it) for a before and after.
 */
import { performance } from "node:perf_hooks";
import { randomUUID } from "node:crypto";
import { createLogger } from "@mkt/runtime/logger";
import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import type { LeaseBilling, LeaseTable as Table } from "../edge/src/leases/lease-table.ts";

// BENCH_LEASE_TABLE: another copy of the table's module (an earlier version, for a before/after).
const { LeaseTable } = (await import(process.env.BENCH_LEASE_TABLE ?? "../edge/src/leases/lease-table.ts")) as {
  LeaseTable: typeof Table;
};

const ADMITS = Number(process.env.BENCH_ADMITS ?? 200_000);
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 1_000);
const BEATS = Number(process.env.BENCH_BEATS ?? 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const LOTS = 10n ** 15n;
const HOUR = 3_600_000n;

const room = (resource: LeaseResource): LeaseRoom => ({
  allowanceId: randomUUID(),
  resource,
  granted: LOTS,
  startsInMs: 0n,
  validForMs: HOUR,
  endsInMs: 0n,
});

const stateOf = (accountId: string, leaseId: string): LeaseState => ({
  leaseId,
  accountId,
  status: LeaseStatus.LEASE_STATUS_OPEN,
  validForMs: HOUR,
  credit: room(LeaseResource.LEASE_RESOURCE_UNSPECIFIED),
  rooms: [room(LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE), room(LeaseResource.LEASE_RESOURCE_REQUESTS_PER_DAY)],
  budgets: [],
  appliedSequence: 0n,
  limitPerMinute: LOTS,
  keyBudgets: [],
});

/** Billing answered from memory: one lease per account, lending more than the run takes. */
function memoryBilling(): LeaseBilling {
  const leases = new Map<string, LeaseState>();
  return {
    grantLease: async (req) => {
      let lease = leases.get(req.accountId);
      if (!lease) leases.set(req.accountId, (lease = stateOf(req.accountId, randomUUID())));
      return { lease, includedCrossing: false, incarnation: 1n };
    },
    heartbeat: async () => ({ incarnation: 1n, leases: [], validForMs: HOUR }) as never,
    returnLeases: async () => ({}) as never,
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function round(): Promise<{ admitNs: number; beatUs: number }> {
  const table = new LeaseTable({
    billing: memoryBilling(),
    ttlMs: 2_000,
    log: createLogger("bench", "silent"),
    edgeId: "bench-edge",
  });
  const accounts = Array.from({ length: ACCOUNTS }, () => randomUUID());
  const worstCase = { credit: 1_000n, tokens: 100n, maxOutputTokens: 64n };
  const admitOne = async (accountId: string) => {
    const ticket = await table.admit({ accountId, tier: "free", atLeast: { credit: 1_000n, tokens: 100n } });
    table.release(await table.takeWorstCase(ticket, worstCase));
  };
  for (const accountId of accounts) await admitOne(accountId);
  const start = performance.now();
  for (let i = 0; i < ADMITS; i++) await admitOne(accounts[i % ACCOUNTS]!);
  const admitNs = ((performance.now() - start) * 1e6) / ADMITS;
  let beats = 0;
  for (let i = 0; i < BEATS; i++) {
    for (const accountId of accounts) await admitOne(accountId);
    const at = performance.now();
    await table.beat();
    beats += performance.now() - at;
  }
  return { admitNs, beatUs: (beats * 1000) / BEATS };
}

await round();
const results = [];
for (let i = 0; i < ROUNDS; i++) results.push(await round());
const admitNs = median(results.map((r) => r.admitNs));
const beatUs = median(results.map((r) => r.beatUs));
console.log(`warm admission (admit + takeWorstCase + release): ${admitNs.toFixed(0)} ns`);
console.log(`heartbeat over ${ACCOUNTS} changed leases (plan, pin, report, apply): ${beatUs.toFixed(0)} µs`);
