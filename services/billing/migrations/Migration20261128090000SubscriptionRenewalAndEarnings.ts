import { Migration } from "@mikro-orm/migrations";

/**
 * Renewal, pause (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md) and the hoster's reports
 * (docs/architecture.md#the-path-of-a-dollar).
 *
 * `subscriptions.hoster_paused_at` is the hoster's pause, kept apart from `status`, so a paused
 * subscription that falls past due comes back paused once paid. `subscriptions.key_id` is the
 * scoped key's id: usage records carry it, which ties a request to its subscription and plan.
 *
 * `hoster_usage_daily` is the hosters' rollup of usage records (per hoster, UTC day, key and
 * model), read by the earnings and subscriber reports instead of the raw records. It is kept by a
 * statement-level trigger on usage_records, so every path that writes records (batched and
 * one-by-one settlement, a late event replacing an expiry row, the sweeper) keeps it exact in the
 * same transaction without each having to remember it. Rows are upserted in key order, so two
 * settling transactions lock rollup rows in the same order.
 */
export class Migration20261128090000SubscriptionRenewalAndEarnings extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table subscriptions add column key_id text, add column hoster_paused_at timestamptz`);
    // A hoster's subscribers, newest first.
    this.addSql(
      `create index subscriptions_hoster_idx on subscriptions (hoster_id, created_at) where hoster_id is not null`,
    );

    this.addSql(`
      create table hoster_usage_daily (
        hoster_id text not null,
        day date not null,
        key_id text not null,
        model_id text not null,
        requests bigint not null default 0,
        input_tokens bigint not null default 0,
        output_tokens bigint not null default 0,
        cost_micros bigint not null default 0,
        hoster_earned_micros bigint not null default 0,
        primary key (hoster_id, day, key_id, model_id)
      )`);

    const upsert = (rows: string, sign: string) => `
      insert into hoster_usage_daily as r (hoster_id, day, key_id, model_id, requests, input_tokens,
        output_tokens, cost_micros, hoster_earned_micros)
      select hoster_id, (created_at at time zone 'UTC')::date, key_id, model_id, ${sign}count(*),
        ${sign}sum(input_tokens), ${sign}sum(output_tokens), ${sign}sum(cost_micros), ${sign}sum(hoster_earned_micros)
      from ${rows} where provider = 'hoster'
      group by 1, 2, 3, 4 order by 1, 2, 3, 4
      on conflict (hoster_id, day, key_id, model_id) do update set
        requests = r.requests + excluded.requests,
        input_tokens = r.input_tokens + excluded.input_tokens,
        output_tokens = r.output_tokens + excluded.output_tokens,
        cost_micros = r.cost_micros + excluded.cost_micros,
        hoster_earned_micros = r.hoster_earned_micros + excluded.hoster_earned_micros;`;
    // Transition tables exist only for their own event, and PL/pgSQL plans a statement when it
    // first runs it, so one function serves all three triggers.
    this.addSql(`
      create function hoster_usage_rollup() returns trigger language plpgsql
      set search_path from current as $$
      begin
        if tg_op in ('UPDATE', 'DELETE') then ${upsert("old_rows", "-")}
        end if;
        if tg_op in ('INSERT', 'UPDATE') then ${upsert("new_rows", "")}
        end if;
        return null;
      end $$`);
    this.addSql(`create trigger usage_records_hoster_rollup_insert after insert on usage_records
      referencing new table as new_rows for each statement execute function hoster_usage_rollup()`);
    this.addSql(`create trigger usage_records_hoster_rollup_update after update on usage_records
      referencing old table as old_rows new table as new_rows for each statement execute function hoster_usage_rollup()`);
    this.addSql(`create trigger usage_records_hoster_rollup_delete after delete on usage_records
      referencing old table as old_rows for each statement execute function hoster_usage_rollup()`);
    // Records settled before this migration.
    this.addSql(upsert("usage_records", ""));
  }

  override async down(): Promise<void> {
    this.addSql(`drop trigger usage_records_hoster_rollup_insert on usage_records`);
    this.addSql(`drop trigger usage_records_hoster_rollup_update on usage_records`);
    this.addSql(`drop trigger usage_records_hoster_rollup_delete on usage_records`);
    this.addSql(`drop function hoster_usage_rollup()`);
    this.addSql(`drop table hoster_usage_daily`);
    this.addSql(`drop index subscriptions_hoster_idx`);
    this.addSql(`alter table subscriptions drop column key_id, drop column hoster_paused_at`);
  }
}
