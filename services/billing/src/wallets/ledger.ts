import type { Micros } from "@mkt/runtime/money";
import { runTogether, sqlArray, type Cte } from "../batch-statement.ts";
import type { Em } from "../context.ts";

/**
 * Ledger account names (docs/architecture.md#the-ledger): one per customer and hoster, and the
 * platform's own.
 */
export const ledgerAccounts = {
  customer: (accountId: string) => `customer:${accountId}`,
  hoster: (hosterId: string) => `hoster:${hosterId}`,
  grants: "platform:grants",
  /** Where operator top-ups come from (payments received outside the platform). */
  topUps: "platform:top_ups",
  revenue: "platform:revenue",
  /**
   * What the platform absorbs when a late event costs more than the customer has
   * (docs/architecture.md#the-path-of-a-dollar).
   */
  writeOffs: "platform:write_offs",
} as const;

/**
 * `usage` and `write_off` are per-request entries of settlements before one entry per batch
 * (`usage_batch`, batch-entry.ts); they stay as history and are no longer written.
 */
export type EntryKind = "grant" | "usage" | "top_up" | "subscription_fee" | "write_off" | "usage_batch";

/** One balanced journal entry: its kind, its reference (unique per kind) and its legs. */
export interface JournalEntry {
  kind: EntryKind;
  reference: string;
  legs: Array<[ledgerAccount: string, amount: Micros]>;
}

/**
 * Writes one balanced journal entry, exactly once per (kind, reference): returns false, writing
 * nothing, when that entry already exists. Zero legs are left out; the legs must sum to zero.
 * `at` dates the entry and its postings (billing's clock, which reports window on); without it
 * they take the transaction's time.
 */
export async function postEntry(
  em: Em,
  kind: EntryKind,
  reference: string,
  legs: Array<[ledgerAccount: string, amount: Micros]>,
  at?: Date,
): Promise<boolean> {
  return (await postEntries(em, [{ kind, reference, legs }], at)).size === 1;
}

/**
 * postEntry for many entries in one statement (journalCtes). Returns `kind:reference` of the
 * entries written; the others existed already and got no legs.
 */
export async function postEntries(em: Em, entries: readonly JournalEntry[], at?: Date): Promise<Set<string>> {
  if (entries.length === 0) return new Set();
  const row = await runTogether(
    em,
    journalCtes(entries, at),
    `select coalesce(array_agg(kind || ':' || reference), '{}') as posted from ${POSTED_ENTRIES}`,
  );
  return new Set(row.posted as string[]);
}

/** The CTE of journalCtes returning the entries written (`id`, `kind`, `reference`). */
export const POSTED_ENTRIES = "posted_entries";

/**
 * The journal entries and their legs as two CTEs of one statement (batch-statement.ts): the
 * entries are inserted unless their (kind, reference) exists, returned as POSTED_ENTRIES, and
 * only their legs are posted. Zero legs are left out; every entry must balance. `at` dates them
 * (billing's clock, which reports window on); without it they take the transaction's time.
 */
export function journalCtes(entries: readonly JournalEntry[], at?: Date): Cte[] {
  for (const { kind, reference, legs } of entries) {
    const sum = legs.reduce((total, [, amount]) => total + amount, 0n);
    if (sum !== 0n) throw new Error(`unbalanced journal entry ${kind}:${reference} (sum ${sum})`);
    // A posting is keyed on (entry, ledger account).
    if (new Set(legs.map(([account]) => account)).size !== legs.length) {
      throw new Error(`journal entry ${kind}:${reference} posts to one account twice`);
    }
  }
  const legs = entries.flatMap((entry) =>
    entry.legs.filter(([, amount]) => amount !== 0n).map(([account, amount]) => ({ entry, account, amount })),
  );
  return [
    {
      name: POSTED_ENTRIES,
      sql: `insert into journal_entries (id, kind, reference, created_at)
        select gen_random_uuid(), e.kind, e.reference, coalesce(?::timestamptz, now())
        from unnest(?::text[], ?::text[]) as e(kind, reference)
        on conflict (kind, reference) do nothing returning id, kind, reference`,
      params: [at ?? null, sqlArray(entries.map((e) => e.kind)), sqlArray(entries.map((e) => e.reference))],
    },
    {
      name: "posted_legs",
      sql: `insert into ledger_postings (entry_id, ledger_account, amount_micros, created_at)
        select e.id, l.account, l.amount, coalesce(?::timestamptz, now())
        from unnest(?::text[], ?::text[], ?::text[], ?::bigint[]) as l(kind, reference, account, amount)
        join ${POSTED_ENTRIES} e on e.kind = l.kind and e.reference = l.reference`,
      params: [
        at ?? null,
        sqlArray(legs.map((l) => l.entry.kind)),
        sqlArray(legs.map((l) => l.entry.reference)),
        sqlArray(legs.map((l) => l.account)),
        sqlArray(legs.map((l) => l.amount)),
      ],
    },
  ];
}

/**
 * Opens the account's wallet when it has none, granting the starting credit in the same
 * transaction. INSERT … ON CONFLICT DO NOTHING makes concurrent first calls wait on the first
 * one's row and then do nothing, so the grant happens exactly once.
 */
export async function openWallet(em: Em, accountId: string, startingCredit: Micros): Promise<void> {
  const created = await em.execute(
    `insert into wallets (account_id, posted_micros, held_micros) values (?, ?, 0)
     on conflict (account_id) do nothing returning account_id`,
    [accountId, startingCredit],
  );
  if (created.length === 0 || startingCredit === 0n) return;
  const granted = await postEntry(em, "grant", accountId, [
    [ledgerAccounts.grants, -startingCredit],
    [ledgerAccounts.customer(accountId), startingCredit],
  ]);
  // The wallet row and the grant are created together; a grant without its wallet is corruption.
  if (!granted) throw new Error(`starting grant already exists for a new wallet (${accountId})`);
}

/** Posted balance and open holds of a wallet, locked for the rest of the transaction. */
export async function lockWallet(em: Em, accountId: string): Promise<{ posted: Micros; held: Micros }> {
  const rows = await em.execute(`select posted_micros, held_micros from wallets where account_id = ? for update`, [
    accountId,
  ]);
  const row = rows[0];
  if (!row) throw new Error(`wallet ${accountId} not found`);
  return { posted: BigInt(row.posted_micros as string), held: BigInt(row.held_micros as string) };
}

/** Renders micro-USD as "$4.999877" (at least two decimals) for user-facing messages. */
export function formatUsd(micros: Micros): string {
  const sign = micros < 0n ? "-" : "";
  const abs = micros < 0n ? -micros : micros;
  const whole = abs / 1_000_000n;
  let fraction = (abs % 1_000_000n).toString().padStart(6, "0").replace(/0+$/, "");
  if (fraction.length < 2) fraction = fraction.padEnd(2, "0");
  return `${sign}$${whole}.${fraction}`;
}
