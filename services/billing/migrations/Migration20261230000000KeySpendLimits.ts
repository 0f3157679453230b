import { Migration } from "@mikro-orm/migrations";

/**
 * Per-key spend limits (docs/adr/0020-key-spend-limits-in-billing.md), enforced through the
 * account's lease: billing owns them, as it owns every other limit.
 *
 * `key_limits`: one row per key that has (or had) a limit; `limit_micros` null means none, and
 * `limit_reset` null means the window never resets. Read with the account's leases, whose key
 * budgets list them.
 *
 * `key_daily_spend`: what each key's settled requests were charged, per UTC day, added once per
 * settlement batch. A window's spend (day, week from Monday, calendar month, all time) is the sum
 * of its days, so changing a key's reset keeps its history true. A request that took key room is
 * counted on its room's window's first day (never in the next window, however late it settles).
 * Key room held by leases is `lease_allowances` rows of resource `key_credit` scoped to the key.
 */
export class Migration20261230000000KeySpendLimits extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table key_limits (
        key_id uuid primary key,
        account_id uuid not null,
        limit_micros bigint check (limit_micros >= 0),
        limit_reset text check (limit_reset in ('daily', 'weekly', 'monthly')),
        updated_at timestamptz not null
      )`);
    this.addSql(`create index key_limits_account_idx on key_limits (account_id) where limit_micros is not null`);
    // What every lease holds of a key's window is summed at each grant for that key.
    this.addSql(
      `create index lease_allowances_key_room_idx on lease_allowances (scope, window_start) where resource = 'key_credit'`,
    );
    this.addSql(`
      create table key_daily_spend (
        key_id uuid not null,
        day date not null,
        spent_micros bigint not null check (spent_micros >= 0),
        primary key (key_id, day)
      )`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table key_daily_spend`);
    this.addSql(`drop index lease_allowances_key_room_idx`);
    this.addSql(`drop table key_limits`);
  }
}
