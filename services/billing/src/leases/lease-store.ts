import type { BudgetTerms } from "@mkt/proto/billing/v1/leases";
import { sqlArray } from "../batch-statement.ts";
import type { Em } from "../context.ts";
import { int8 } from "../context.ts";
import type { LeaseReport } from "@mkt/proto/billing/v1/leases";
import type { LimitReset } from "../key-limits/key-windows.ts";
import { write, writeRow, type RowShape } from "../write-batch.ts";

/** A lease row as the lease transactions read it (after the account's wallet is locked). */
export interface LeaseRow {
  id: string;
  edgeId: string;
  accountId: string;
  tier: string;
  status: "open" | "fenced" | "closed";
  appliedSequence: bigint;
  heldMicros: bigint;
  settledMicros: bigint;
  /** When the closer gave its hold back (nothing is held for it any more), or null. */
  releasedAt: Date | null;
  /** Null while open (its edge session's deadline applies); the deadline it was fenced or closed at. */
  deadline: Date | null;
  allowances: AllowanceRow[];
  budgets: BudgetRow[];
  /** The account's spend-limited keys (their rooms are the allowances scoped to them). */
  keyLimits: KeyLimitRow[];
}

/**
 * A key with a spend limit (docs/adr/0020-key-spend-limits-in-billing.md): its lease budget is
 * KEY_CREDIT room in its window.
 */
export interface KeyLimitRow {
  keyId: string;
  limitMicros: bigint;
  reset: LimitReset;
}

/** A subscription's budget nested in a lease (its rooms are the allowances scoped to it). */
export interface BudgetRow {
  subscriptionId: string;
  status: "open" | "fenced";
  state: string;
  periodIndex: number;
  /** The terms snapshot the edge admits by (LeaseState's BudgetTerms). */
  terms: BudgetTerms;
}

export interface AllowanceRow {
  id: string;
  scope: string;
  resource: string;
  windowStart: Date | null;
  windowEnd: Date | null;
  granted: bigint;
  admitted: bigint;
  settled: bigint;
}

export interface WalletRow {
  posted: bigint;
  held: bigint;
}

/**
 * Locks the accounts' wallets in ascending order, the order every lease transaction and fence
 * takes them in. Grants and heartbeats take the lock an UPDATE takes (they change held_micros in
 * the same transaction) rather than FOR SHARE, whose upgrade would deadlock two edges' heartbeats;
 * either way a fence (FOR UPDATE) commits entirely before or entirely after them.
 */
export async function lockWallets(em: Em, accountIds: Iterable<string>): Promise<Map<string, WalletRow>> {
  const ids = [...new Set(accountIds)].sort();
  const wallets = new Map<string, WalletRow>();
  if (ids.length === 0) return wallets;
  const rows = await em.execute(
    `select account_id, posted_micros, held_micros from wallets where account_id in (${ids.map(() => "?").join(", ")})
     order by account_id for no key update`,
    ids,
  );
  for (const row of rows) {
    wallets.set(row.account_id as string, { posted: int8(row.posted_micros), held: int8(row.held_micros) });
  }
  return wallets;
}

/**
 * lockWallets for the accounts of the given leases, found in the same statement: the wallets a
 * batch of usage events charges, locked in one round trip.
 */
export async function lockLeaseWallets(em: Em, leaseIds: readonly string[]): Promise<Map<string, WalletRow>> {
  const wallets = new Map<string, WalletRow>();
  if (leaseIds.length === 0) return wallets;
  const rows = await em.execute(
    `select account_id, posted_micros, held_micros from wallets
     where account_id in (select account_id from leases where id = any(?::uuid[]))
     order by account_id for no key update`,
    [sqlArray(leaseIds)],
  );
  for (const row of rows) {
    wallets.set(row.account_id as string, { posted: int8(row.posted_micros), held: int8(row.held_micros) });
  }
  return wallets;
}

/**
 * The leases matching `where` with their allowances. Read after the wallets are locked, in a
 * statement of its own, so it sees whatever a fence committed before the lock was granted.
 */
export async function loadLeases(em: Em, where: string, params: unknown[]): Promise<LeaseRow[]> {
  const rows = await em.execute(leasesQuery(where), params);
  return rows.map(toLeaseRow);
}

/** The query loadLeases runs, for a statement that reads more beside the leases. */
export function leasesQuery(where: string): string {
  return `select l.id, l.edge_id, l.account_id, l.tier, l.status, l.applied_sequence, l.held_micros, l.settled_micros, l.released_at, l.deadline,
       coalesce((select json_agg(json_build_object('id', a.id, 'scope', a.scope, 'resource', a.resource,
         'window_start', a.window_start, 'window_end', a.window_end, 'granted', a.granted::text,
         'admitted', a.admitted::text, 'settled', a.settled::text) order by a.resource, a.window_start)
         from lease_allowances a where a.lease_id = l.id), '[]') as allowances,
       coalesce((select json_agg(json_build_object('subscription_id', b.subscription_id, 'status', b.status,
         'state', b.state, 'period_index', b.period_index, 'hoster_id', b.hoster_id,
         'pricing_model', b.pricing_model, 'input_price', b.input_price_per_1m_micros::text,
         'output_price', b.output_price_per_1m_micros::text, 'overage_price', b.overage_price_per_1m_micros::text,
         'max_context_tokens', b.max_context_tokens::text, 'max_output_tokens', b.max_output_tokens::text,
         'rpm_limit', b.rpm_limit::text, 'product_id', b.product_id) order by b.subscription_id)
         from lease_budgets b where b.lease_id = l.id), '[]') as budgets,
       coalesce((select json_agg(json_build_object('key_id', k.key_id, 'limit_micros', k.limit_micros::text,
         'limit_reset', k.limit_reset) order by k.key_id)
         from key_limits k where k.account_id = l.account_id and k.limit_micros is not null), '[]') as key_limits
     from leases l where ${where} order by l.account_id, l.created_at`;
}

/** A row of leasesQuery as a LeaseRow. */
export function toLeaseRow(row: Record<string, unknown>): LeaseRow {
  return {
    id: row.id as string,
    edgeId: row.edge_id as string,
    accountId: row.account_id as string,
    tier: row.tier as string,
    status: row.status as LeaseRow["status"],
    appliedSequence: int8(row.applied_sequence),
    heldMicros: int8(row.held_micros),
    settledMicros: int8(row.settled_micros),
    releasedAt: row.released_at ? new Date(row.released_at as string) : null,
    deadline: row.deadline ? new Date(row.deadline as string) : null,
    allowances: (row.allowances as Array<Record<string, unknown>>).map((a) => ({
      id: a.id as string,
      scope: a.scope as string,
      resource: a.resource as string,
      windowStart: a.window_start ? new Date(a.window_start as string) : null,
      windowEnd: a.window_end ? new Date(a.window_end as string) : null,
      granted: int8(a.granted),
      admitted: int8(a.admitted),
      settled: int8(a.settled),
    })),
    budgets: (row.budgets as Array<Record<string, unknown>>).map((b) => ({
      subscriptionId: b.subscription_id as string,
      status: b.status as BudgetRow["status"],
      state: b.state as string,
      periodIndex: Number(b.period_index),
      terms: {
        hosterId: (b.hoster_id as string | null) ?? "",
        pricingModel: b.pricing_model as string,
        inputPricePer1mMicros: int8(b.input_price),
        outputPricePer1mMicros: int8(b.output_price),
        overagePricePer1mMicros: int8(b.overage_price),
        maxContextTokens: int8(b.max_context_tokens),
        maxOutputTokens: int8(b.max_output_tokens),
        rpmLimit: int8(b.rpm_limit),
        productId: (b.product_id as string | null) ?? "",
      },
    })),
    keyLimits: keyLimitRows(row.key_limits as Array<Record<string, unknown>>),
  };
}

function keyLimitRows(rows: Array<Record<string, unknown>>): KeyLimitRow[] {
  return rows.map((k) => ({
    keyId: k.key_id as string,
    limitMicros: int8(k.limit_micros),
    reset: (k.limit_reset as LimitReset | null) ?? null,
  }));
}

/** The account's spend-limited keys, for a lease just opened (loadLeases reads them for the others). */
export async function accountKeyLimits(em: Em, accountId: string): Promise<KeyLimitRow[]> {
  const rows = await em.execute(
    `select key_id, limit_micros::text as limit_micros, limit_reset from key_limits
     where account_id = ? and limit_micros is not null order by key_id`,
    [accountId],
  );
  return keyLimitRows(rows);
}

/**
 * The rows a lease call changes, as shapes of writeRow: a batched call (a heartbeat's, a grant's)
 * applies each shape's rows in one statement. Increments, or values only one write of a call sets.
 */
export const LEASE_WRITES = {
  /** A report applied: the sequence, and when it admitted anything (null: unchanged). */
  applied: {
    columns: [
      ["id", "uuid"],
      ["seq", "int8"],
      ["used_at", "timestamptz"],
    ],
    keyColumns: 1,
    merge: "last",
    sql: (v) => `update leases l set applied_sequence = v.seq, last_used_at = coalesce(v.used_at, l.last_used_at)
      from ${v} where l.id = v.id`,
  },
  /** An allowance's admitted total as reported. */
  admitted: {
    columns: [
      ["id", "uuid"],
      ["admitted", "int8"],
    ],
    keyColumns: 1,
    merge: "last",
    sql: (v) => `update lease_allowances a set admitted = v.admitted from ${v} where a.id = v.id`,
  },
  /** Room added to (or, negative, taken back from) an allowance. */
  granted: {
    columns: [
      ["id", "uuid"],
      ["delta", "int8"],
    ],
    keyColumns: 1,
    merge: "sum",
    sql: (v) => `update lease_allowances a set granted = a.granted + v.delta from ${v} where a.id = v.id`,
  },
  leaseHeld: {
    columns: [
      ["id", "uuid"],
      ["delta", "int8"],
    ],
    keyColumns: 1,
    merge: "sum",
    sql: (v) => `update leases l set held_micros = l.held_micros + v.delta from ${v} where l.id = v.id`,
  },
  walletHeld: {
    columns: [
      ["account_id", "uuid"],
      ["delta", "int8"],
    ],
    keyColumns: 1,
    merge: "sum",
    sql: (v) =>
      `update wallets w set held_micros = w.held_micros + v.delta from ${v} where w.account_id = v.account_id`,
  },
  /** Requests counted in an account's window (room granted counts at once). */
  counted: {
    columns: [
      ["account_id", "uuid"],
      ["win", "text"],
      ["window_start", "timestamptz"],
      ["delta", "int8"],
    ],
    keyColumns: 3,
    merge: "sum",
    sql: (v) => `insert into rate_counters (account_id, "window", window_start, count)
      select account_id, win, window_start, delta from ${v}
      on conflict (account_id, "window", window_start) do update set count = rate_counters.count + excluded.count`,
  },
} satisfies Record<string, RowShape>;

/**
 * Moves `delta` into (positive) or out of (negative) the lease's and the wallet's holds together
 * (the wallet's row is locked already by every caller).
 */
export async function shiftHold(em: Em, lease: LeaseRow, wallet: WalletRow, delta: bigint): Promise<void> {
  if (delta === 0n) return;
  lease.heldMicros += delta;
  wallet.held += delta;
  await writeRow(em, LEASE_WRITES.leaseHeld, [lease.id, delta]);
  await writeRow(em, LEASE_WRITES.walletHeld, [lease.accountId, delta]);
}

/** Sets an allowance's granted total to `granted` (from the value the lease call read and keeps). */
export async function setGranted(em: Em, allowance: AllowanceRow, granted: bigint): Promise<void> {
  if (granted === allowance.granted) return;
  const delta = granted - allowance.granted;
  allowance.granted = granted;
  await writeRow(em, LEASE_WRITES.granted, [allowance.id, delta]);
}

/**
 * Applies the edge's cumulative totals unless billing has already applied this sequence or a
 * later one (a delayed or repeated report changes nothing). Admitted totals only grow and never
 * pass what was granted. Returns whether the report was applied.
 */
export async function applyReport(
  em: Em,
  lease: LeaseRow,
  report: LeaseReport,
  sequence: bigint,
  now: Date,
): Promise<boolean> {
  if (lease.status === "closed" || sequence <= lease.appliedSequence) return false;
  let used = false;
  for (const { allowanceId, admitted } of report.admitted) {
    const allowance = lease.allowances.find((a) => a.id === allowanceId);
    if (!allowance) continue;
    // More than granted is an edge bug; billing already holds everything granted, so capping
    // loses nothing.
    const next = admitted > allowance.granted ? allowance.granted : admitted;
    // Slots are not cumulative: the edge reports its requests in flight now, which also fall.
    if (allowance.resource === "slots" ? next === allowance.admitted : next <= allowance.admitted) continue;
    allowance.admitted = next;
    used = true;
    await writeRow(em, LEASE_WRITES.admitted, [allowance.id, next]);
  }
  lease.appliedSequence = sequence;
  await writeRow(em, LEASE_WRITES.applied, [lease.id, sequence, used ? now : null]);
  return true;
}

export const creditOf = (lease: LeaseRow) => lease.allowances.find((a) => a.resource === "credit");

/**
 * Closes a lease on the edge's final report: billing now holds admitted − settled until
 * `MAX_REQUEST_MS` after the last moment a request could have been admitted on it (the report, or
 * the deadline it was fenced at if that came first: the requests admitted may still be running),
 * and the request room the edge did not use goes back to its window while that window is current.
 * A report that comes after that (the edge could not reach billing, or billing its database, for
 * longer) releases it at once: every request admitted on it has ended.
 */
export async function closeReported(
  em: Em,
  lease: LeaseRow,
  wallet: WalletRow,
  now: Date,
  maxRequestMs: number,
): Promise<void> {
  const admittedUntil = lease.deadline && lease.deadline < now ? lease.deadline : now;
  const releaseAt = new Date(admittedUntil.getTime() + maxRequestMs);
  const ended = releaseAt <= now;
  const admitted = creditOf(lease)?.admitted ?? 0n;
  const keep = !ended && admitted > lease.settledMicros ? admitted - lease.settledMicros : 0n;
  await shiftHold(em, lease, wallet, keep - lease.heldMicros);
  for (const a of lease.allowances) {
    if (a.resource === "credit" || a.granted === a.admitted || !a.windowEnd || a.windowEnd <= now) continue;
    await uncount(em, lease, a, a.granted - a.admitted);
  }
  lease.status = "closed";
  // Released at once only when it holds nothing at all: no credit, and no slot or included token
  // of a request still running (a closed lease's slots count its requests in flight until it is
  // released; releasing it at once would let another edge take them while they run).
  const inUse = lease.allowances.some(
    (a) => (a.resource === "slots" && a.admitted > 0n) || (a.resource === "included_tokens" && a.admitted > a.settled),
  );
  // lease.heldMicros is the row's (read under the wallet's lock, shifted above).
  const release = ended || (lease.heldMicros === 0n && !inUse);
  await write(
    em,
    `update leases set status = 'closed', deadline = coalesce(deadline, ?), closed_at = ?, release_at = ?,
       released_at = ? where id = ?`,
    [now, now, releaseAt, release ? now : null, lease.id],
  );
}

/**
 * After a budget's recall ack (its edge dropped the budget and reported what it admitted): the
 * room the edge did not use goes back — slots beyond its requests in flight, and plan requests and
 * tokens of windows not yet ended to their counters — so another edge's grant can take it.
 * Nothing more is admitted on a dropped budget, so its granted totals shrink to its admitted.
 */
export async function returnBudgetRoom(em: Em, lease: LeaseRow, subscriptionId: string, now: Date): Promise<void> {
  for (const a of lease.allowances) {
    if (a.scope !== subscriptionId || a.granted <= a.admitted) continue;
    if (a.resource === "sub_requests_minute" || a.resource === "sub_tokens_minute") {
      if (!a.windowEnd || a.windowEnd <= now) continue;
      await uncount(em, lease, a, a.granted - a.admitted);
    } else if (a.resource !== "slots" && a.resource !== "included_tokens") continue;
    await setGranted(em, a, a.admitted);
  }
}

/** Gives `n` unused units of a window's room back to the counter it was counted in at grant. */
async function uncount(em: Em, lease: LeaseRow, a: AllowanceRow, n: bigint): Promise<void> {
  if (a.resource === "requests_minute" || a.resource === "requests_day") {
    await write(
      em,
      `update rate_counters set count = count - ? where account_id = ? and "window" = ? and window_start = ?`,
      [n, lease.accountId, a.resource === "requests_day" ? "day" : "minute", a.windowStart],
    );
  } else if (a.resource === "sub_requests_minute" || a.resource === "sub_tokens_minute") {
    const column = a.resource === "sub_requests_minute" ? "requests" : "tokens";
    await write(
      em,
      `update subscription_rate_counters set ${column} = ${column} - ? where subscription_id = ? and window_start = ?`,
      [n, a.scope, a.windowStart],
    );
  }
  // Included tokens and slots are not counters: what a lease holds of them is read from its rows.
}
