import type { Micros } from "@mkt/runtime/money";
import type { Em } from "../context.ts";
import type { AllowanceRow, LeaseRow, WalletRow } from "../leases/lease-store.ts";
import { insertUsageRecords, type UsageRow } from "../usage/usage-records.ts";
import { postEntries, type JournalEntry } from "../wallets/ledger.ts";

const values = (rows: number, row: string) => Array.from({ length: rows }, () => row).join(", ");

/**
 * What settling a batch changes, kept in memory while its events are settled one after the other
 * and written at the end in a handful of statements, whatever the batch's size (DESIGN.md §2.6):
 * per lease its hold released, per wallet its posted and held amounts, the journal entries and
 * the usage records. The leases and wallets given are the batch's in-memory rows, changed at once,
 * so every later event of the batch sees what the earlier ones did.
 */
export class SettlementWrites {
  readonly #leases = new Map<string, { held: bigint; settled: bigint }>();
  readonly #wallets = new Map<string, { posted: bigint; held: bigint }>();
  readonly #entries: JournalEntry[] = [];
  readonly #records: UsageRow[] = [];
  /** Key room settled per allowance id, and key spend per key and UTC day (`key day`). */
  readonly #rooms = new Map<string, bigint>();
  readonly #keySpend = new Map<string, bigint>();

  /** Releases `amount` of the lease's hold as settled (its request's worst case). */
  release(lease: LeaseRow, wallet: WalletRow, amount: Micros): void {
    if (amount === 0n) return;
    lease.heldMicros -= amount;
    lease.settledMicros += amount;
    wallet.held -= amount;
    const row = this.#leases.get(lease.id) ?? { held: 0n, settled: 0n };
    row.held -= amount;
    row.settled += amount;
    this.#leases.set(lease.id, row);
    this.#wallet(lease.accountId).held -= amount;
  }

  /** Takes `amount` off the account's posted balance (what its customer paid). */
  charge(accountId: string, wallet: WalletRow, amount: Micros): void {
    if (amount === 0n) return;
    wallet.posted -= amount;
    this.#wallet(accountId).posted -= amount;
  }

  /** A journal entry that must be new (a request's charge or write-off). */
  post(entry: JournalEntry): void {
    this.#entries.push(entry);
  }

  /** A usage record for a request that has none. */
  record(row: UsageRow): void {
    this.#records.push(row);
  }

  /** Settles `amount` out of a key's room (its request's worst case), as `release` does the credit. */
  settleRoom(allowance: AllowanceRow, amount: Micros): void {
    if (amount === 0n) return;
    allowance.settled += amount;
    this.#rooms.set(allowance.id, (this.#rooms.get(allowance.id) ?? 0n) + amount);
  }

  /** Adds a request's charge to its key's spend on the UTC day of `at`. */
  spend(keyId: string, at: Date, amount: Micros): void {
    if (amount === 0n) return;
    const key = `${keyId} ${at.toISOString().slice(0, 10)}`;
    this.#keySpend.set(key, (this.#keySpend.get(key) ?? 0n) + amount);
  }

  /** Writes it all; throws (rolling the batch back) if an entry or record existed already. */
  async flush(em: Em): Promise<void> {
    const leases = [...this.#leases];
    if (leases.length > 0) {
      await em.execute(
        `update leases l set held_micros = l.held_micros + v.held, settled_micros = l.settled_micros + v.settled
         from (values ${values(leases.length, "(?::uuid, ?::bigint, ?::bigint)")}) v(id, held, settled)
         where l.id = v.id`,
        leases.flatMap(([id, d]) => [id, d.held, d.settled]),
      );
    }
    const wallets = [...this.#wallets].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    if (wallets.length > 0) {
      await em.execute(
        `update wallets w set posted_micros = w.posted_micros + v.posted, held_micros = w.held_micros + v.held
         from (values ${values(wallets.length, "(?::uuid, ?::bigint, ?::bigint)")}) v(account_id, posted, held)
         where w.account_id = v.account_id`,
        wallets.flatMap(([id, d]) => [id, d.posted, d.held]),
      );
    }
    await this.#flushKeys(em);
    const posted = await postEntries(em, this.#entries);
    const twice = this.#entries.find((e) => !posted.has(`${e.kind}:${e.reference}`));
    if (twice) throw new Error(`${twice.kind} entry for ${twice.reference} exists without a usage record`);
    const written = await insertUsageRecords(em, this.#records);
    const again = this.#records.find((r) => !written.has(r.requestId));
    if (again) throw new Error(`usage record for ${again.requestId} appeared while its batch settled`);
  }

  async #flushKeys(em: Em): Promise<void> {
    const rooms = [...this.#rooms];
    if (rooms.length > 0) {
      await em.execute(
        `update lease_allowances a set settled = a.settled + v.settled
         from (values ${values(rooms.length, "(?::uuid, ?::bigint)")}) v(id, settled) where a.id = v.id`,
        rooms.flat(),
      );
    }
    // In key order, so two settlers' batches take the rows' locks in the same order.
    const spend = [...this.#keySpend].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    if (spend.length > 0) {
      await em.execute(
        `insert into key_daily_spend (key_id, day, spent_micros)
         values ${values(spend.length, "(?::uuid, ?::date, ?::bigint)")}
         on conflict (key_id, day) do update set spent_micros = key_daily_spend.spent_micros + excluded.spent_micros`,
        spend.flatMap(([key, amount]) => [...key.split(" "), amount]),
      );
    }
  }

  #wallet(accountId: string): { posted: bigint; held: bigint } {
    let row = this.#wallets.get(accountId);
    if (!row) this.#wallets.set(accountId, (row = { posted: 0n, held: 0n }));
    return row;
  }
}
