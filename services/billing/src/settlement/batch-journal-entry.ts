import type { Cte } from "../batch-statement.ts";
import { ledgerAccounts } from "../wallets/ledger.ts";

/** The CTE of batchEntryCtes giving the batch's legs (`account`, `amount`). */
export const BATCH_LEGS = "batch_legs";

/**
 * The legs one settled usage record contributes (docs/adr/0040-one-journal-entry-per-settled-batch.md),
 * as a lateral VALUES over a record `r`: the customer pays its cost less what was written off,
 * the platform keeps its fee, its hoster earns the rest, and the platform absorbs the write-off.
 * They sum to zero because fee + earning = cost, which each record holds exactly.
 */
export const RECORD_LEGS = `(values
    ('customer:' || r.account_id, r.write_off_micros - r.cost_micros),
    ('${ledgerAccounts.revenue}', r.platform_fee_micros),
    ('hoster:' || r.hoster_id, r.hoster_earned_micros),
    ('${ledgerAccounts.writeOffs}', -r.write_off_micros)
  ) as l(account, amount)`;

/**
 * A settled batch's one journal entry (`usage_batch`, `entryId` its id and reference) as three
 * CTEs of its statement, read from `records`, the CTE returning the usage records the statement
 * actually inserted (`insert … on conflict (request_id) do nothing returning …`): a request
 * another settler recorded first is not among them, so it adds nothing to any leg. Its legs are
 * per ledger account the sums of those records' legs (RECORD_LEGS), the records charged nothing
 * left out (their `entry_id` is null) and zero sums too; a batch that moved no money posts no
 * entry. Legs are posted in account order.
 */
export function batchEntryCtes(entryId: string, records: string): Cte[] {
  return [
    {
      name: BATCH_LEGS,
      sql: `select l.account, sum(l.amount)::bigint as amount
        from ${records} r cross join lateral ${RECORD_LEGS}
        where r.entry_id is not null
        group by l.account having sum(l.amount) <> 0`,
      params: [],
    },
    {
      name: "batch_entry",
      sql: `insert into journal_entries (id, kind, reference, created_at)
        select ?::uuid, 'usage_batch', ?, now() where exists (select 1 from ${BATCH_LEGS})
        returning id`,
      params: [entryId, entryId],
    },
    {
      name: "batch_postings",
      sql: `insert into ledger_postings (entry_id, ledger_account, amount_micros, created_at)
        select e.id, l.account, l.amount, now() from batch_entry e cross join ${BATCH_LEGS} l
        order by l.account`,
      params: [],
    },
  ];
}
