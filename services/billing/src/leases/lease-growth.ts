import { max0 } from "@mkt/runtime/bigint-math";
import { AppError } from "@mkt/runtime/errors";
import { newId } from "@mkt/runtime/ids";
import type { Micros } from "@mkt/runtime/money";
import { billingDb, prepare } from "../billing-db.ts";
import type { BillingContext, Em } from "../context.ts";
import { int8 } from "../context.ts";
import { rateLimitRefusal, tierLimits } from "../rate-limits/rate-limiter.ts";
import { formatUsd } from "../wallets/ledger.ts";
import type { AllowanceResource } from "./allowance-resource.ts";
import { growthFor } from "./lease-sizing.ts";
import { refusalUnlessSettling } from "./settling-holds.ts";
import { REQUEST_WINDOWS, windowsOf, type WindowSpan } from "./lease-windows.ts";
import { write, writeRow } from "../write-batch.ts";
import type { AllowanceRow, LeaseRow, WalletRow } from "./lease-rows.ts";
import { LEASE_WRITES, setGranted, shiftHold } from "./lease-writes.ts";

/** Account-level amounts in each resource's unit. */
export interface Amounts {
  credit: bigint;
  requests: bigint;
  /**
   * The request in hand takes less credit if the account has less (GrantLease's
   * min_credit_micros, a request without max_tokens): at least this. 0: `credit` or nothing.
   */
  minCredit?: bigint;
}

export interface Growth {
  /** The request in hand: covered, or the grant is refused (GrantLease). Zero for a heartbeat. */
  inHand: Amounts;
  demandPerSecond: Amounts;
  /**
   * How far ahead of a window's end its next window's room is granted: one TTL, or more for a
   * report sent ahead for it (LeaseReport.next_window, nextWindowAheadMs).
   */
  nextWindowAheadMs?: number;
  /**
   * What the sizing rule reads, read ahead for many leases at once (readSizing); absent, growLease
   * reads it for this lease alone.
   */
  sizing?: Sizing;
}

export interface Step {
  resource: AllowanceResource;
  /** '' for the account's rooms, the subscription id for a budget's. */
  scope?: string;
  counter?: "minute" | "day";
  span?: WindowSpan;
  add: bigint;
}

/** The 402 of a request the account cannot pay: its balance and what the request needs. */
export function insufficientCredits(available: Micros, needed: Micros, maxTokensGiven: boolean): AppError {
  return new AppError(
    "insufficient_credits",
    `Insufficient credits: your balance is ${formatUsd(available)} and this request needs ${formatUsd(needed)}` +
      (maxTokensGiven ? " (prompt plus max_tokens)." : " (prompt plus at least one output token)."),
  );
}

/**
 * Grows an open lease by the sizing rule in every account resource, or refuses the request in
 * hand (nothing written) when the account cannot cover it: credit from posted − held, request
 * room from the tier's limit less what its window has counted (admitted requests and room
 * granted to every lease). Room granted is counted in `rate_counters` at once, so the sum over
 * all leases never passes a window's limit. Wallet locked by the caller.
 */
export async function growLease(
  ctx: BillingContext,
  em: Em,
  lease: LeaseRow,
  wallet: WalletRow,
  growth: Growth,
  now: Date,
): Promise<void> {
  const ttlMs = ctx.config.LEASE_TTL_MS;
  const limits = tierLimits(ctx.config.TIERS, lease.tier);
  const demand = growth.demandPerSecond.requests;
  // The windows grown below: the current one of each, and the next one only with demand, the
  // request in hand's included: one arriving within a margin of the boundary cannot use the
  // current window's room on the edge (its validity ends a margin early), so without the next
  // one's it would come back here until the boundary passed.
  const wanted = demand > growth.inHand.requests ? demand : growth.inHand.requests;
  const spans = REQUEST_WINDOWS.map((window) => {
    const { current, next } = windowsOf(window, now, growth.nextWindowAheadMs ?? ttlMs);
    return { window, current, next: wanted > 0n ? next : undefined };
  });
  const { edges, counts } =
    growth.sizing ?? (await readSizing(em, lease.edgeId, [lease.accountId], now, ttlMs)).get(lease.accountId)!;
  const countOf = (counter: string, start: Date) => counts.get(counterKey(counter, start)) ?? 0n;
  const size = (left: bigint, allowance: AllowanceRow | undefined, demand: bigint, inHand: bigint) =>
    growthFor({ left, edges, demandPerSecond: demand, inHand, ttlMs }, unspent(allowance));
  const steps: Step[] = [];

  const credit = lease.allowances.find((a) => a.resource === "credit");
  const creditLeft = wallet.posted - wallet.held;
  const coverable = max0(creditLeft + unspent(credit));
  const { minCredit = 0n } = growth.inHand;
  let creditInHand = growth.inHand.credit;
  if (creditInHand > coverable) {
    // Without max_tokens the cap shrinks to what the whole account pays (the edge sizes it from
    // the lease's credit), so the grant takes all there is when that covers the least request.
    if (minCredit === 0n || minCredit > coverable) {
      const needed = minCredit || creditInHand;
      // Short only by requests not yet settled: the grant waits for their batch (settling-holds.ts).
      throw await refusalUnlessSettling(
        em,
        lease,
        credit,
        wallet,
        needed - coverable,
        insufficientCredits(coverable, needed, minCredit === 0n),
      );
    }
    creditInHand = coverable;
  }
  steps.push({
    resource: "credit",
    add: size(creditLeft, credit, growth.demandPerSecond.credit, creditInHand),
  });

  for (const { window, current, next } of spans) {
    const limit = window.counter === "minute" ? limits.limitPerMinute : limits.limitPerDay;
    const mine = lease.allowances.find(
      (a) => a.scope === "" && a.resource === window.resource && sameTime(a.windowStart, current.start),
    );
    const left = limit - countOf(window.counter, current.start);
    if (growth.inHand.requests > left + unspent(mine)) {
      const resetSeconds = Math.max(1, Math.ceil((current.end.getTime() - now.getTime()) / 1000));
      throw rateLimitRefusal(window.counter, limit, resetSeconds);
    }
    steps.push({ ...window, span: current, add: size(left, mine, demand, growth.inHand.requests) });
    // The next window's room comes only with demand: an idle lease lapses with its window.
    if (next) {
      const ahead = lease.allowances.find(
        (a) => a.scope === "" && a.resource === window.resource && sameTime(a.windowStart, next.start),
      );
      const nextLeft = limit - countOf(window.counter, next.start);
      steps.push({ ...window, span: next, add: size(nextLeft, ahead, demand, growth.inHand.requests) });
    }
  }

  for (const step of steps) {
    if (step.add <= 0n) continue;
    if (step.resource === "credit") {
      await addRoom(em, lease, step);
      await shiftHold(em, lease, wallet, step.add);
    } else {
      // Read ahead counts stay true for a later lease of the account in the same transaction.
      const key = counterKey(step.counter!, step.span!.start);
      counts.set(key, (counts.get(key) ?? 0n) + step.add);
      await addRoom(em, lease, step);
      await writeRow(em, LEASE_WRITES.counted, [lease.accountId, step.counter!, step.span!.start, step.add]);
    }
  }
}

// The reads below are built and compiled once (prepare), bound per call (they run per grant and
// per heartbeat transaction); times are compared as the driver reads them (BillingDb): as ISO text.

/**
 * Edges other than the lease's that used the account's leases since a time: the `n` of the
 * sizing rule, read alone (edgesUsing).
 */
const OTHER_EDGES = prepare((p: { accountId: string; edgeId: string; since: string }, db) =>
  db
    .selectFrom("leases as l")
    .select((eb) => eb.fn.count<string>("l.edge_id").distinct().as("n"))
    .where("l.account_id", "=", p.accountId)
    .where("l.edge_id", "<>", p.edgeId)
    .where("l.last_used_at", ">=", p.since),
);

/**
 * readSizing's statement: per account, the other edges since `since` (a row whose window is
 * null), then its counters of each request window from that window's current start (`minute`,
 * `day`: REQUEST_WINDOWS' counters).
 */
const SIZING = prepare(
  (p: { accountIds: string[]; edgeId: string; since: string } & Record<RequestCounter, string>, db) =>
    db
      .selectFrom("leases as l")
      .select((eb) => [
        "l.account_id",
        eb.lit(null).$castTo<string | null>().as("window"),
        eb.cast<string | null>(eb.lit(null), "timestamptz").as("window_start"),
        eb.fn.count<string>("l.edge_id").distinct().as("n"),
      ])
      .where((eb) => eb("l.account_id", "=", eb.fn.any(eb.val(p.accountIds))))
      .where("l.edge_id", "<>", p.edgeId)
      .where("l.last_used_at", ">=", p.since)
      .groupBy("l.account_id")
      .unionAll(
        db
          .selectFrom("rate_counters as c")
          .select(["c.account_id", "c.window", "c.window_start", "c.count as n"])
          .where((eb) => eb("c.account_id", "=", eb.fn.any(eb.val(p.accountIds))))
          .where((eb) =>
            eb.or(
              REQUEST_WINDOWS.map((window) =>
                eb.and([eb("c.window", "=", window.counter), eb("c.window_start", ">=", p[window.counter])]),
              ),
            ),
          ),
      ),
);

type RequestCounter = (typeof REQUEST_WINDOWS)[number]["counter"];

/** What growLease sizes an account's rooms by: the `n` of the sizing rule and the window counters it reads. */
export interface Sizing {
  /** Edges that used the account in the last 2 TTL, the lease's own included. */
  edges: number;
  /** Requests counted per window (counterKey), absent: 0. */
  counts: Map<string, bigint>;
}

const counterKey = (counter: string, start: Date) => `${counter} ${start.getTime()}`;

/**
 * Sizing for the leases of one edge on many accounts, in one statement (a heartbeat grows dozens):
 * for each account, the other edges that used it since 2 TTL ago and its counters of every
 * request window not yet ended (the current ones and any next one growLease may grant ahead).
 */
export async function readSizing(
  em: Em,
  edgeId: string,
  accountIds: readonly string[],
  now: Date,
  ttlMs: number,
): Promise<Map<string, Sizing>> {
  const sizing = new Map<string, Sizing>(accountIds.map((id) => [id, { edges: 1, counts: new Map() }]));
  if (accountIds.length === 0) return sizing;
  const starts = Object.fromEntries(
    REQUEST_WINDOWS.map((window) => [window.counter, windowsOf(window, now, ttlMs).current.start.toISOString()]),
  ) as Record<RequestCounter, string>;
  const rows = await SIZING(await billingDb(em), {
    accountIds: [...accountIds],
    edgeId,
    since: new Date(now.getTime() - 2 * ttlMs).toISOString(),
    ...starts,
  });
  for (const row of rows) {
    const account = sizing.get(row.account_id)!;
    if (row.window === null) account.edges = Number(int8(row.n)) + 1;
    else account.counts.set(counterKey(row.window, new Date(row.window_start!)), int8(row.n));
  }
  return sizing;
}

export const unspent = (a: AllowanceRow | undefined) => (a ? a.granted - a.admitted : 0n);
export const sameTime = (a: Date | null, b: Date) => a !== null && a.getTime() === b.getTime();

/** Edges that used the account in the last 2 TTL, this one included. */
export async function edgesUsing(em: Em, lease: LeaseRow, now: Date, ttlMs: number): Promise<number> {
  const [row] = await OTHER_EDGES(await billingDb(em), {
    accountId: lease.accountId,
    edgeId: lease.edgeId,
    since: new Date(now.getTime() - 2 * ttlMs).toISOString(),
  });
  return Number(int8(row?.n)) + 1;
}

const COUNTED = prepare((p: { accountId: string; window: string; start: string }, db) =>
  db
    .selectFrom("rate_counters as c")
    .select("c.count")
    .where("c.account_id", "=", p.accountId)
    .where("c.window", "=", p.window)
    .where("c.window_start", "=", p.start),
);

/** Requests counted in the account's window (admitted, and room granted to every lease). */
export async function counted(em: Em, accountId: string, window: string, start: Date): Promise<bigint> {
  const [row] = await COUNTED(await billingDb(em), { accountId, window, start: start.toISOString() });
  return int8(row?.count);
}

/** Adds room to the lease's allowance for the step's resource and window, creating it if new. */
export async function addRoom(em: Em, lease: LeaseRow, step: Step): Promise<void> {
  const start = step.span?.start ?? null;
  const scope = step.scope ?? "";
  const existing = lease.allowances.find(
    (a) =>
      a.scope === scope &&
      a.resource === step.resource &&
      (start === null ? a.windowStart === null : sameTime(a.windowStart, start)),
  );
  if (existing) {
    await setGranted(em, existing, existing.granted + step.add);
    return;
  }
  const allowance: AllowanceRow = {
    id: newId(),
    scope,
    resource: step.resource,
    windowStart: start,
    windowEnd: step.span?.end ?? null,
    granted: step.add,
    admitted: 0n,
    settled: 0n,
  };
  lease.allowances.push(allowance);
  await write(
    em,
    `insert into lease_allowances (id, lease_id, scope, resource, window_start, window_end, granted, admitted)
     values (?, ?, ?, ?, ?, ?, ?, 0)`,
    [allowance.id, lease.id, scope, allowance.resource, allowance.windowStart, allowance.windowEnd, allowance.granted],
  );
}
