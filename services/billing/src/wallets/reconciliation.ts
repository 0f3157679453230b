import { PLATFORM_SHARE_PERCENT } from "@mkt/runtime/money";
import { HOSTER_DAILY, HOURLY, hosterDailyDeltas, hourlyDeltas, rollupMismatchSql } from "../usage/rollup-queue.ts";
import { ledgerAccounts } from "./ledger.ts";

/** One way the books disagree with themselves: which check, about what, and the two figures. */
export interface Discrepancy {
  check: string;
  subject: string;
  expected: string | null;
  actual: string | null;
}

/** Runs one SQL statement in billing's schema and returns its rows (an Em, a pg client, a test's db). */
export type RunQuery = (sql: string) => Promise<Array<Record<string, unknown>>>;

const share = PLATFORM_SHARE_PERCENT.toString();
/** A key id billing keeps spend for (isUuid): the edge's keys; anything else is skipped there too. */
const UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

/**
 * What each usage journal entry must post, per leg account, from its usage records: the customer
 * pays the cost less what was written off, the platform keeps the fee, the hoster earns the rest,
 * and the platform absorbs the write-off. A settled batch's `usage_batch` entry sums the records
 * that name it (`entry_id`); a per-request `usage` entry of earlier settlements is the record with
 * that request id as reference (its write-off, if any, was an entry of its own).
 */
const EXPECTED_USAGE_LEGS = `
  select r.entry_id, l.account, sum(l.amount) as amount
  from records r
  cross join lateral (values
    ('customer:' || r.account_id, r.write_off_micros - r.cost_micros),
    ('${ledgerAccounts.revenue}', r.platform_fee_micros),
    ('hoster:' || r.hoster_id, r.hoster_earned_micros),
    ('${ledgerAccounts.writeOffs}', -r.write_off_micros)
  ) as l(account, amount)
  where r.entry_id is not null
  group by 1, 2 having sum(l.amount) <> 0
  union all
  select e.id, l.account, sum(l.amount)
  from journal_entries e
  join records r on e.kind = 'usage' and r.request_id::text = e.reference
  cross join lateral (values
    ('customer:' || r.account_id, -r.cost_micros),
    ('${ledgerAccounts.revenue}', r.platform_fee_micros),
    ('hoster:' || r.hoster_id, r.hoster_earned_micros)
  ) as l(account, amount)
  group by 1, 2 having sum(l.amount) <> 0`;

/**
 * The books checked against themselves, in one statement: every row it returns is a discrepancy,
 * so a healthy ledger returns none.
 *
 * - `usage_leg`: a usage entry's leg differs from the sum over its usage records (the proof that
 *   a settled batch moved exactly what its records say, each record once).
 * - `record_split`: a record's fee and earning do not add up to its cost, or are not the split
 *   of its cost (hoster-served: the platform keeps floor(cost × 20 / 100); otherwise all of it).
 * - `unproven_charge`: a record charged something that no usage entry posted (its batch's, or
 *   for a record settled before batch entries, its own).
 * - `unbalanced_entry`: an entry's postings do not sum to zero.
 * - `wallet_postings`: a wallet's posted balance is not the sum of its customer's postings.
 * - `wallet_holds`: a wallet's held credit is not the sum of its leases' holds.
 * - `hourly_rollup`, `hoster_rollup`: a row of the hourly usage or the hosters' daily rollup, with
 *   the deltas queued for it and not folded yet, is not the GROUP BY over the usage records.
 * - `key_spend`: a key's spend over all its days (with the deltas queued and not folded) is not
 *   what its records charged (cost less write-off). Per key, not per day: a limited key's request
 *   counts on its window's first day, which the record does not carry.
 *
 * The usage records are those attached and those of the months detached past the retention
 * (`detached`, whose tables remain): the proof of a month's money does not end with its partition.
 */
export const reconciliationSql = (detached: readonly string[]) => `
  with records as not materialized (
    ${["usage_records", ...detached.map((name) => `"${name}"`)].map((table) => `select * from ${table}`).join(" union all ")}
  ),
  expected as (${EXPECTED_USAGE_LEGS}),
  actual as (
    select p.entry_id, p.ledger_account as account, sum(p.amount_micros) as amount
    from ledger_postings p join journal_entries e on e.id = p.entry_id and e.kind in ('usage', 'usage_batch')
    group by 1, 2
  )
  select 'usage_leg' as check, coalesce(x.entry_id, a.entry_id)::text || ' ' || coalesce(x.account, a.account) as subject,
    x.amount::text as expected, a.amount::text as actual
  from expected x full join actual a on a.entry_id = x.entry_id and a.account = x.account
  where x.amount is distinct from a.amount
  union all
  select 'record_split', request_id::text, cost_micros::text,
    platform_fee_micros::text || ' + ' || hoster_earned_micros::text
  from records
  where cost_micros < 0 or platform_fee_micros + hoster_earned_micros <> cost_micros
    or write_off_micros not between 0 and cost_micros
    or hoster_earned_micros <> case when provider = 'hoster'
      then cost_micros - cost_micros * ${share} / 100 else 0 end
  union all
  select 'unproven_charge', r.request_id::text, r.cost_micros::text, null
  from records r
  where r.cost_micros > 0
    and not exists (select 1 from journal_entries e where e.kind = 'usage_batch' and e.id = r.entry_id)
    and not exists (select 1 from journal_entries e where e.kind = 'usage' and e.reference = r.request_id::text)
  union all
  select 'unbalanced_entry', entry_id::text, '0', sum(amount_micros)::text
  from ledger_postings group by entry_id having sum(amount_micros) <> 0
  union all
  select 'wallet_postings', w.account_id::text, coalesce(p.amount, 0)::text, w.posted_micros::text
  from wallets w
  left join (select ledger_account, sum(amount_micros) as amount from ledger_postings group by 1) p
    on p.ledger_account = 'customer:' || w.account_id
  where w.posted_micros <> coalesce(p.amount, 0)
  union all
  select 'wallet_holds', w.account_id::text, coalesce(l.held, 0)::text, w.held_micros::text
  from wallets w
  left join (select account_id, sum(held_micros) as held from leases group by 1) l on l.account_id = w.account_id
  where w.held_micros <> coalesce(l.held, 0)
  union all
  ${rollupMismatchSql("hourly_rollup", HOURLY, hourlyDeltas("records"))}
  union all
  ${rollupMismatchSql("hoster_rollup", HOSTER_DAILY, hosterDailyDeltas("records"))}
  union all
  select 'key_spend', coalesce(x.key_id, a.key_id)::text, x.spent::text, a.spent::text
  from (
    select key_id::uuid as key_id, sum(cost_micros - write_off_micros) as spent from records
    where key_id ~* '${UUID_PATTERN}' group by 1 having sum(cost_micros - write_off_micros) <> 0
  ) x
  full join (
    select key_id, sum(spent_micros) as spent from (
      select key_id, spent_micros from key_daily_spend
      union all
      select d.key_id, d.spent_micros from usage_rollup_queue q, unnest(q.key_spend) as d
    ) u group by 1
  ) a on a.key_id = x.key_id
  where x.spent is distinct from a.spent`;

/**
 * usage_records' monthly partitions detached past USAGE_RETENTION_MONTHS (usage-partitions.ts):
 * tables of the schema named as a partition that are no partition any more.
 */
const DETACHED_PARTITIONS_SQL = `
  select c.relname as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where n.nspname = current_schema() and c.relkind = 'r' and not c.relispartition
    and c.relname ~ '^usage_records_y[0-9]{4}m[0-9]{2}$'
  order by 1`;

/**
 * Reconciles the books (reconciliationSql): returns every discrepancy, none when money is where
 * the records say it is. A full scan, for tests, benches and an operator's audit; never on a
 * request's path.
 */
export async function reconcile(run: RunQuery): Promise<Discrepancy[]> {
  const detached = (await run(DETACHED_PARTITIONS_SQL)).map((row) => row.name as string);
  const rows = await run(reconciliationSql(detached));
  return rows.map((row) => ({
    check: row.check as string,
    subject: row.subject as string,
    expected: (row.expected as string | null) ?? null,
    actual: (row.actual as string | null) ?? null,
  }));
}
