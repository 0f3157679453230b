import { Migration } from "@mikro-orm/migrations";

/**
 * Rollups leave the settlement transaction (docs/settlement.md#rollups-folded-off-the-settlement-transaction).
 *
 * `usage_rollup_queue` holds one row per settled batch: its deltas to the hourly usage rollup, to
 * the hosters' daily rollup and to the daily spend of keys without a spend limit, summed per row of
 * those tables from the usage records the batch inserted, as arrays of a composite type per rollup
 * (its key columns, then its sums, in the rollup's names). A fold worker moves them into the
 * rollups every few seconds. The settlement
 * transaction, which holds its accounts' wallet locks, then writes one small row instead of
 * upserting a row of each rollup per bucket, and a bucket that many batches touch is written once
 * per fold instead of once per batch.
 *
 * The hosters' daily rollup was kept by statement-level triggers on `usage_records`, whose
 * transition tables copied every inserted row; they go, and the queue's deltas keep it instead.
 * Nothing updates or deletes usage records.
 */
export class Migration20270202000000RollupQueue extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create type usage_hourly_delta as (account_id uuid, hour timestamptz, model_id text, provider text,
        subscription_id text, requests bigint, input_tokens bigint, output_tokens bigint, cost_micros bigint,
        platform_fee_micros bigint, hoster_earned_micros bigint, latency_ms_sum bigint, failed bigint,
        cached_input_tokens bigint)`);
    this.addSql(`
      create type hoster_daily_delta as (hoster_id text, day date, key_id text, model_id text, requests bigint,
        input_tokens bigint, output_tokens bigint, cost_micros bigint, hoster_earned_micros bigint)`);
    this.addSql(`create type key_spend_delta as (key_id uuid, day date, spent_micros bigint)`);
    this.addSql(`
      create table usage_rollup_queue (
        id bigint generated always as identity primary key,
        created_at timestamptz not null default now(),
        hourly usage_hourly_delta[] not null default '{}',
        hoster_daily hoster_daily_delta[] not null default '{}',
        key_spend key_spend_delta[] not null default '{}'
      )`);
    this.addSql(`drop trigger usage_records_hoster_rollup_insert on usage_records`);
    this.addSql(`drop trigger usage_records_hoster_rollup_update on usage_records`);
    this.addSql(`drop trigger usage_records_hoster_rollup_delete on usage_records`);
    this.addSql(`drop function hoster_usage_rollup()`);
  }

  override async down(): Promise<void> {
    // Deltas not folded yet go into their rollups first; the hosters' rollup is rebuilt from the
    // records, which the triggers below keep from here on.
    this.addSql(`
      insert into usage_hourly as r (account_id, hour, model_id, provider, subscription_id, requests, input_tokens,
        output_tokens, cost_micros, platform_fee_micros, hoster_earned_micros, latency_ms_sum, failed,
        cached_input_tokens)
      select account_id, hour, model_id, provider, subscription_id, sum(requests), sum(input_tokens),
        sum(output_tokens), sum(cost_micros), sum(platform_fee_micros), sum(hoster_earned_micros),
        sum(latency_ms_sum), sum(failed), sum(cached_input_tokens)
      from usage_rollup_queue q, unnest(q.hourly) as x
      group by 1, 2, 3, 4, 5
      on conflict (account_id, hour, model_id, provider, subscription_id) do update set
        requests = r.requests + excluded.requests, input_tokens = r.input_tokens + excluded.input_tokens,
        output_tokens = r.output_tokens + excluded.output_tokens, cost_micros = r.cost_micros + excluded.cost_micros,
        platform_fee_micros = r.platform_fee_micros + excluded.platform_fee_micros,
        hoster_earned_micros = r.hoster_earned_micros + excluded.hoster_earned_micros,
        latency_ms_sum = r.latency_ms_sum + excluded.latency_ms_sum, failed = r.failed + excluded.failed,
        cached_input_tokens = r.cached_input_tokens + excluded.cached_input_tokens`);
    this.addSql(`
      insert into key_daily_spend as r (key_id, day, spent_micros)
      select key_id, day, sum(spent_micros)
      from usage_rollup_queue q, unnest(q.key_spend) as x
      group by 1, 2
      on conflict (key_id, day) do update set spent_micros = r.spent_micros + excluded.spent_micros`);
    this.addSql(`drop table usage_rollup_queue`);
    this.addSql(`drop type usage_hourly_delta`);
    this.addSql(`drop type hoster_daily_delta`);
    this.addSql(`drop type key_spend_delta`);
    this.addSql(`delete from hoster_usage_daily`);
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
    this.addSql(upsert("usage_records", ""));
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
  }
}
