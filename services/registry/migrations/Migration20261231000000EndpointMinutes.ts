import { Migration } from "@mikro-orm/migrations";

/**
 * Live figures per endpoint (a hoster's model), one row per minute: counts, and histograms of
 * latency, time to first token and output tokens per second as integer arrays of fixed buckets
 * (services/registry/src/hosters/endpoint-figures.ts). A window's figures are its minutes summed,
 * histograms element by element: `int_array_add` adds two, `int_array_sum` aggregates many.
 * Registry's replicas add a batch's minutes with one upsert each, so they add up.
 */
export class Migration20261231000000EndpointMinutes extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create function int_array_add(a integer[], b integer[]) returns integer[]
         language sql immutable parallel safe as
       $$ select coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) order by i), '{}')
            from unnest(a, b) with ordinality as t(x, y, i) $$`,
    );
    this.addSql(
      `create aggregate int_array_sum(integer[]) (sfunc = int_array_add, stype = integer[], initcond = '{}')`,
    );
    this.addSql(
      `create table endpoint_minutes (
         hoster_id uuid not null references hosters (id) on delete cascade,
         model_id text not null,
         minute timestamptz not null,
         requests integer not null,
         successes integer not null,
         faults integer not null,
         upstream_429s integer not null,
         latency_hist integer[] not null,
         ttft_hist integer[] not null,
         tps_hist integer[] not null,
         primary key (hoster_id, model_id, minute)
       )`,
    );
    this.addSql(`create index endpoint_minutes_minute_idx on endpoint_minutes (minute)`);
  }
}
