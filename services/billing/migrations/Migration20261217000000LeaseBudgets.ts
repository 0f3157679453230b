import { Migration } from "@mikro-orm/migrations";

/**
 * Nested subscription budgets in admission leases and settlement from lease holds
 * (docs/adr/0007-admission-leases.md).
 *
 * `lease_budgets` is one row per (lease, subscription): `status` open or fenced (a cancel, pause
 * or past due fences it in its own transaction; only GrantLease reopens it, once the
 * subscription is active again), `state` the subscription's status when last seen, and the
 * terms snapshot that settles the requests admitted on it (as a reservation's columns do).
 * Its allowances are `lease_allowances` rows whose `scope` is the subscription id.
 *
 * `lease_allowances.settled` counts the worst-case tokens of settled requests in a budget's
 * included-tokens allowance: what the lease no longer holds of the period's included tokens.
 *
 * `write_off` journal entries carry the shortfall of an event settled after its hold was
 * released (the platform absorbs it; the customer's balance never goes below zero).
 */
export class Migration20261217000000LeaseBudgets extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table lease_budgets (
        lease_id uuid not null references leases (id),
        subscription_id uuid not null,
        status text not null check (status in ('open', 'fenced')),
        state text not null,
        hoster_id uuid,
        period_index integer not null,
        pricing_model text not null,
        included_tokens bigint not null default 0,
        input_price_per_1m_micros bigint not null default 0,
        output_price_per_1m_micros bigint not null default 0,
        overage_price_per_1m_micros bigint not null default 0,
        fenced_at timestamptz,
        primary key (lease_id, subscription_id)
      )`);
    this.addSql(`create index lease_budgets_subscription_idx on lease_budgets (subscription_id) where status = 'open'`);
    this.addSql(`alter table lease_allowances add column settled bigint not null default 0 check (settled >= 0)`);
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check
       check (kind in ('grant', 'usage', 'top_up', 'subscription_fee', 'write_off'))`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check
       check (kind in ('grant', 'usage', 'top_up', 'subscription_fee'))`,
    );
    this.addSql(`alter table lease_allowances drop column settled`);
    this.addSql(`drop table lease_budgets`);
  }
}
