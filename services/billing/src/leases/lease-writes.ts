import type { Em } from "../context.ts";
import { writeRow, type RowShape } from "../write-batch.ts";
import type { AllowanceRow, LeaseRow, WalletRow } from "./lease-rows.ts";

/**
 * The rows a lease call changes, as shapes of writeRow: a batched call (a heartbeat's, a grant's)
 * applies each shape's rows in one statement, and each row once, whatever changed it: the report
 * applied, room added or given back, the hold shifted, the lease closed. A heartbeat that applies
 * a lease's report and grows it writes one version of the lease and of each allowance, not two:
 * each version of a row is a heap tuple, a WAL record and, unless the update is HOT, an entry in
 * every index of the table. Values are increments, or values only one write of a call sets.
 */
export const LEASE_WRITES = {
  /**
   * A lease's changes in one call: the report applied (its sequence; when it admitted anything,
   * the time), its hold shifted by `held`, and, closed, when and until when it holds (null:
   * unchanged). No indexed column changes unless it closes, so the update is HOT.
   */
  lease: {
    columns: [
      ["id", "uuid"],
      ["seq", "int8"],
      ["used_at", "timestamptz"],
      ["held", "int8"],
      ["closed_at", "timestamptz"],
      ["release_at", "timestamptz"],
      ["released_at", "timestamptz"],
    ],
    keyColumns: 1,
    merge: ["set", "set", "sum", "set", "set", "set"],
    sql: (v) => `update leases l set applied_sequence = coalesce(v.seq, l.applied_sequence),
      last_used_at = coalesce(v.used_at, l.last_used_at), held_micros = l.held_micros + v.held,
      status = case when v.closed_at is null then l.status else 'closed' end,
      deadline = case when v.closed_at is null then l.deadline else coalesce(l.deadline, v.closed_at) end,
      closed_at = coalesce(v.closed_at, l.closed_at), release_at = coalesce(v.release_at, l.release_at),
      released_at = coalesce(v.released_at, l.released_at)
      from ${v} where l.id = v.id`,
  },
  /** An allowance's admitted total as reported (null: unchanged) and room added (or, negative, taken back). */
  allowance: {
    columns: [
      ["id", "uuid"],
      ["admitted", "int8"],
      ["granted", "int8"],
    ],
    keyColumns: 1,
    merge: ["set", "sum"],
    sql: (v) => `update lease_allowances a set admitted = coalesce(v.admitted, a.admitted),
      granted = a.granted + v.granted from ${v} where a.id = v.id`,
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
  await writeRow(em, LEASE_WRITES.lease, [lease.id, null, null, delta, null, null, null]);
  await writeRow(em, LEASE_WRITES.walletHeld, [lease.accountId, delta]);
}

/** Sets an allowance's granted total to `granted` (from the value the lease call read and keeps). */
export async function setGranted(em: Em, allowance: AllowanceRow, granted: bigint): Promise<void> {
  if (granted === allowance.granted) return;
  const delta = granted - allowance.granted;
  allowance.granted = granted;
  await writeRow(em, LEASE_WRITES.allowance, [allowance.id, null, delta]);
}
