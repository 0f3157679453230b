import { randomUUID } from "node:crypto";
import type { Micros } from "@mkt/runtime/money";
import { runTogether, sqlArray, type Cte } from "../batch-statement.ts";
import type { Em } from "../context.ts";
import type { AllowanceRow, LeaseRow, WalletRow } from "../leases/lease-store.ts";
import { periodUsageCte, type PeriodUse } from "../subscriptions/period-usage.ts";
import { NEW_RECORDS, usageRecordCtes, type UsageRow } from "../usage/usage-records.ts";
import { batchEntryCtes } from "./batch-journal-entry.ts";

const byKey = <T>([a]: [string, T], [b]: [string, T]) => (a < b ? -1 : a > b ? 1 : 0);
/** A composite key (`id at`) back into its parts. */
const split = (key: string) => ({ id: key.slice(0, key.indexOf(" ")), at: key.slice(key.indexOf(" ") + 1) });
const ifAny = (rows: readonly unknown[], cte: Cte) => (rows.length > 0 ? cte : undefined);
const add = (map: Map<string, bigint>, key: string, amount: bigint) => map.set(key, (map.get(key) ?? 0n) + amount);

/**
 * What settling a batch changes, gathered in memory while its events are settled one after the
 * other and written at the end in one set-based statement, whatever the batch's size: per lease
 * its hold released, per wallet its posted and held amounts, the rooms settled out of lease
 * allowances, spend of limited keys, subscription periods' use, tokens given back to their minute,
 * the usage records, the batch's one journal entry and its one row of rollup deltas (the hourly and
 * hosters' daily usage and the spend of keys without a limit, folded into the rollups later:
 * rollup-fold.ts). Each is one multi-row write of column arrays (batch-statement.ts). The leases and wallets given are the batch's in-memory
 * rows, changed at once, so every later event of the batch sees what the earlier ones did.
 *
 * Money moves from the records the statement inserted, not from memory: the journal entry's legs
 * (batch-journal-entry.ts) and each customer wallet's posted balance are sums over them, so the
 * ledger, the wallets and the records cannot disagree.
 */
export class SettlementWrites {
  /** The batch's journal entry, its id and reference: fresh for every attempt of a batch. */
  readonly entryId = randomUUID();
  readonly #leases = new Map<string, { held: bigint; settled: bigint }>();
  /** Holds released per wallet (its posted balance follows the records, flush). */
  readonly #walletHolds = new Map<string, bigint>();
  readonly #records: UsageRow[] = [];
  /** Records of requests charged nothing, which another settler may have written first. */
  readonly #uncharged = new Set<string>();
  /** Room settled per allowance id, key spend per key and UTC day (`key day`). */
  readonly #rooms = new Map<string, bigint>();
  readonly #keySpend = new Map<string, bigint>();
  /** Spend of keys without a limit, per `key day`: queued with the rollup deltas. */
  readonly #queuedKeySpend = new Map<string, bigint>();
  readonly #periodUses: PeriodUse[] = [];
  /** Tokens given back per subscription and minute (`subscription window_start`). */
  readonly #tokensBack = new Map<string, bigint>();

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
    add(this.#walletHolds, lease.accountId, -amount);
  }

  /**
   * Takes `amount` off the batch's in-memory wallet (what its customer paid), for the batch's later
   * events; the row itself is written from the records (flush).
   */
  charge(wallet: WalletRow, amount: Micros): void {
    wallet.posted -= amount;
  }

  /**
   * A usage record for a request that has none, settled in this batch: one that cost something is
   * settled by the batch's journal entry, which its fee, earning and write-off are legs of.
   */
  record(row: UsageRow): void {
    this.#records.push({ ...row, entryId: row.costMicros > 0n ? this.entryId : null });
  }

  /**
   * A usage record of a request charged nothing: nothing was locked for it, so another settler
   * may write it first, and then this one is left out (flush does not return it).
   */
  recordWithoutCharge(row: UsageRow): void {
    this.#records.push(row);
    this.#uncharged.add(row.requestId);
  }

  /** Settles `amount` out of a lease allowance (a key's room, a period's included tokens). */
  settleRoom(allowance: AllowanceRow, amount: Micros): void {
    if (amount === 0n) return;
    allowance.settled += amount;
    add(this.#rooms, allowance.id, amount);
  }

  /**
   * Adds a request's charge to its key's spend on the UTC day of `at`: in this statement for a key
   * with a spend limit (its next grant reads it), with the rollup deltas otherwise.
   */
  spend(keyId: string, at: Date, amount: Micros, limited: boolean): void {
    if (amount === 0n) return;
    add(limited ? this.#keySpend : this.#queuedKeySpend, `${keyId} ${at.toISOString().slice(0, 10)}`, amount);
  }

  /** Counts a subscription request's tokens in its period's use. */
  countPeriodUse(use: PeriodUse): void {
    this.#periodUses.push(use);
  }

  /** Gives a subscription request's unused worst-case tokens back to its minute's tpm counter. */
  giveBackTokens(subscriptionId: string, windowStart: Date, tokens: bigint): void {
    if (tokens <= 0n) return;
    add(this.#tokensBack, `${subscriptionId} ${windowStart.toISOString()}`, tokens);
  }

  /**
   * Writes it all in one statement; returns the request ids whose records it wrote. Throws
   * (rolling the batch back) if a charged request's record existed already: its hold was released
   * here, which only the settler that records it may do.
   */
  async flush(em: Em): Promise<Set<string>> {
    const row = await runTogether(
      em,
      // A write with no rows is left out (PostgreSQL would still plan it); the records, which
      // the select reads, are always there.
      // The writes that read NEW_RECORDS follow it (a WITH query sees only those before it).
      [
        ...usageRecordCtes(
          this.#records,
          [...this.#queuedKeySpend].sort(byKey).map(([key, micros]) => {
            const { id, at } = split(key);
            return { keyId: id, day: at, micros };
          }),
        ),
        ...(this.#records.some((r) => r.entryId) ? batchEntryCtes(this.entryId, NEW_RECORDS) : []),
        ...this.#holdCtes(),
        ...this.#allowanceCtes(),
      ].filter((cte): cte is Cte => cte !== undefined),
      `select coalesce(array_agg(request_id::text), '{}') as written from ${NEW_RECORDS}`,
    );
    const written = new Set(row.written as string[]);
    const again = this.#records.find((r) => !written.has(r.requestId) && !this.#uncharged.has(r.requestId));
    if (again) throw new Error(`usage record for ${again.requestId} appeared while its batch settled`);
    return written;
  }

  /**
   * The leases' holds, and the wallets' holds and posted balances: a wallet's posted balance falls
   * by what its customer's leg of the journal entry posts (the records inserted, less write-offs),
   * so it moves with its postings. Only charged records count: their wallets are locked.
   */
  #holdCtes(): Array<Cte | undefined> {
    const leases = [...this.#leases].sort(byKey);
    const holds = [...this.#walletHolds].sort(byKey);
    const charged = this.#records.some((r) => r.entryId);
    return [
      ifAny(leases, {
        name: "lease_holds",
        sql: `update leases l set held_micros = l.held_micros + v.held, settled_micros = l.settled_micros + v.settled
          from unnest(?::uuid[], ?::bigint[], ?::bigint[]) v(id, held, settled) where l.id = v.id`,
        params: [
          sqlArray(leases.map(([id]) => id)),
          sqlArray(leases.map(([, d]) => d.held)),
          sqlArray(leases.map(([, d]) => d.settled)),
        ],
      }),
      holds.length > 0 || charged
        ? {
            name: "wallet_balances",
            sql: `update wallets w set posted_micros = w.posted_micros + v.posted, held_micros = w.held_micros + v.held
              from (select account_id, sum(posted)::bigint as posted, sum(held)::bigint as held from (
                  select account_id, 0 as posted, held from unnest(?::uuid[], ?::bigint[]) h(account_id, held)
                  union all
                  select account_id, sum(write_off_micros - cost_micros), 0 from ${NEW_RECORDS}
                  where entry_id is not null group by account_id
                ) d group by account_id) v
              where w.account_id = v.account_id`,
            params: [sqlArray(holds.map(([id]) => id)), sqlArray(holds.map(([, held]) => held))],
          }
        : undefined,
    ];
  }

  /** Rooms settled, limited keys' spend, periods' use and tokens given back, each in key order. */
  #allowanceCtes(): Array<Cte | undefined> {
    const rooms = [...this.#rooms].sort(byKey);
    const spend = [...this.#keySpend].sort(byKey).map(([key, amount]) => ({ ...split(key), amount }));
    const tokens = [...this.#tokensBack].sort(byKey).map(([key, n]) => ({ ...split(key), n }));
    return [
      ifAny(rooms, {
        name: "rooms_settled",
        sql: `update lease_allowances a set settled = a.settled + v.settled
          from unnest(?::uuid[], ?::bigint[]) v(id, settled) where a.id = v.id`,
        params: [sqlArray(rooms.map(([id]) => id)), sqlArray(rooms.map(([, n]) => n))],
      }),
      ifAny(spend, {
        name: "key_spend",
        sql: `insert into key_daily_spend (key_id, day, spent_micros)
          select * from unnest(?::uuid[], ?::date[], ?::bigint[])
          on conflict (key_id, day) do update set spent_micros = key_daily_spend.spent_micros + excluded.spent_micros`,
        params: [
          sqlArray(spend.map((s) => s.id)),
          sqlArray(spend.map((s) => s.at)),
          sqlArray(spend.map((s) => s.amount)),
        ],
      }),
      ifAny(this.#periodUses, periodUsageCte(this.#periodUses)),
      ifAny(tokens, {
        name: "tokens_back",
        sql: `update subscription_rate_counters c set tokens = greatest(0, c.tokens - v.tokens)
          from unnest(?::uuid[], ?::timestamptz[], ?::bigint[]) v(subscription_id, window_start, tokens)
          where c.subscription_id = v.subscription_id and c.window_start = v.window_start`,
        params: [
          sqlArray(tokens.map((t) => t.id)),
          sqlArray(tokens.map((t) => t.at)),
          sqlArray(tokens.map((t) => t.n)),
        ],
      }),
    ];
  }
}
