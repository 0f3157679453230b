import { Migration } from "@mikro-orm/migrations";

/**
 * A scoped key reads only its subscription's usage (least privilege), so usage
 * records and their hourly rollups say which subscription a request was made under ('' for the
 * account's own keys, as `hoster_id` is '' for platform models). The rollup's key gains the
 * column: an account's reports sum over it, a subscription's filter on it.
 */
export class Migration20261202000000UsageBySubscription extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table usage_records add column subscription_id text not null default ''`);
    this.addSql(`alter table usage_hourly add column subscription_id text not null default ''`);
    this.addSql(`alter table usage_hourly drop constraint usage_hourly_pkey`);
    this.addSql(`alter table usage_hourly add primary key (account_id, hour, model_id, provider, subscription_id)`);
  }

  override async down(): Promise<void> {
    // Buckets that differ only by subscription are merged back into one before the key narrows.
    this.addSql(`
      create temporary table usage_hourly_merged on commit drop as
      select account_id, hour, model_id, provider, sum(requests) as requests, sum(input_tokens) as input_tokens,
        sum(output_tokens) as output_tokens, sum(cost_micros) as cost_micros,
        sum(platform_fee_micros) as platform_fee_micros, sum(hoster_earned_micros) as hoster_earned_micros,
        sum(latency_ms_sum) as latency_ms_sum, sum(failed) as failed
      from usage_hourly group by 1, 2, 3, 4`);
    this.addSql(`delete from usage_hourly`);
    this.addSql(`alter table usage_hourly drop constraint usage_hourly_pkey`);
    this.addSql(`alter table usage_hourly drop column subscription_id`);
    this.addSql(`alter table usage_hourly add primary key (account_id, hour, model_id, provider)`);
    this.addSql(`insert into usage_hourly select * from usage_hourly_merged`);
    this.addSql(`alter table usage_records drop column subscription_id`);
  }
}
