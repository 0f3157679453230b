import { Migration } from "@mikro-orm/migrations";

const UUID_TEXT = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

/**
 * Usage records become an append-only table partitioned by month on `created_at`, keyed on
 * (request_id, created_at) with request_id a uuid (docs/adr/0045-usage-records-append.md). A
 * unique key of a partitioned table must hold its partition key; settlement takes created_at from
 * the event, so one request still has one key and `on conflict` still settles it once.
 *
 * Existing records keep their ids (every id the edge minted is a UUID; the migration stops, with
 * a count, if a record's is not) and move into monthly partitions made for their months. The
 * default partition takes a record no monthly one covers, so an insert never fails; billing's
 * maintenance (usage-partitions.ts) keeps the coming months' partitions made ahead, moving any
 * rows the default took for a month into that month's partition when it makes it, and detaches
 * months past USAGE_RETENTION_MONTHS. It runs as the runtime role, which may not create tables:
 * the two functions below run as their owner, the schema's owner (security definer), with the
 * search path they were made with.
 *
 * The copy rewrites the table once; on a large table the migration runs for as long as that takes.
 */
export class Migration20270204000000UsageRecordsAppend extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      do $$ declare bad bigint; begin
        select count(*) into bad from usage_records where request_id !~* '${UUID_TEXT}';
        if bad > 0 then
          raise exception '% usage records have a request_id that is not a UUID: they cannot move to a uuid key', bad;
        end if;
      end $$`);
    this.addSql(`alter table usage_records alter column request_id type uuid using request_id::uuid`);
    this.addSql(`alter table usage_records rename to usage_records_before_partitions`);
    this.addSql(
      `alter table usage_records_before_partitions rename constraint usage_records_pkey to usage_records_before_partitions_pkey`,
    );
    this.addSql(
      `alter index usage_records_account_time_idx rename to usage_records_before_partitions_account_time_idx`,
    );
    this.addSql(`
      create table usage_records (like usage_records_before_partitions including defaults including constraints)
      partition by range (created_at)`);
    this.addSql(`alter table usage_records add constraint usage_records_pkey primary key (request_id, created_at)`);
    this.addSql(`create index usage_records_account_time_idx on usage_records (account_id, created_at, request_id)`);
    // Time-range scans (audits, a month's export) read a few blocks' summaries, not a B-tree.
    this.addSql(`create index usage_records_created_brin on usage_records using brin (created_at)`);
    this.addSql(`create table usage_records_default partition of usage_records default`);
    this.addSql(ADD_PARTITIONS);
    this.addSql(DETACH_PARTITIONS);
    // One partition per month the records span, through the current one; then the records.
    this.addSql(`
      select usage_records_add_partitions(coalesce(min(created_at), now()), now())
      from usage_records_before_partitions`);
    this.addSql(`insert into usage_records select * from usage_records_before_partitions`);
    this.addSql(`drop table usage_records_before_partitions`);
  }

  override async down(): Promise<void> {
    this.addSql(
      `create table usage_records_unpartitioned (like usage_records including defaults including constraints)`,
    );
    this.addSql(`insert into usage_records_unpartitioned select * from usage_records`);
    this.addSql(`drop table usage_records`);
    this.addSql(`drop function usage_records_add_partitions(timestamptz, timestamptz)`);
    this.addSql(`drop function usage_records_detach_partitions(timestamptz)`);
    this.addSql(`alter table usage_records_unpartitioned rename to usage_records`);
    this.addSql(`alter table usage_records alter column request_id type text`);
    this.addSql(`alter table usage_records add constraint usage_records_pkey primary key (request_id)`);
    this.addSql(`create index usage_records_account_time_idx on usage_records (account_id, created_at, request_id)`);
  }
}

/**
 * Makes the monthly partition (UTC months, named usage_records_yYYYYmMM) of every month from
 * `from`'s through `through`'s that has none, moving into it the rows the default partition took
 * for that month (the default is locked meanwhile, so none arrive between the move and the
 * attach, and two replicas making the same month take turns). A month whose partition was
 * detached (its table is still there) is not made again. Returns the partitions made.
 */
const ADD_PARTITIONS = `
  create function usage_records_add_partitions(from_at timestamptz, through_at timestamptz)
  returns setof text language plpgsql security definer set search_path from current as $fn$
  declare
    month timestamptz := date_trunc('month', from_at at time zone 'UTC') at time zone 'UTC';
    last_month timestamptz := date_trunc('month', through_at at time zone 'UTC') at time zone 'UTC';
    next_month timestamptz;
    part text;
  begin
    while month <= last_month loop
      next_month := ((month at time zone 'UTC') + interval '1 month') at time zone 'UTC';
      part := 'usage_records_' || to_char(month at time zone 'UTC', '"y"YYYY"m"MM');
      -- Looked for again once the lock is held: another replica may have made it meanwhile.
      if to_regclass(part) is null then
        lock table usage_records_default in access exclusive mode;
      end if;
      if to_regclass(part) is null then
        execute format('create table %I (like usage_records including defaults including constraints)', part);
        execute format(
          'with moved as (delete from usage_records_default where created_at >= %L and created_at < %L returning *)
           insert into %I select * from moved', month, next_month, part);
        execute format('alter table usage_records attach partition %I for values from (%L) to (%L)',
          part, month, next_month);
        return next part;
      end if;
      month := next_month;
    end loop;
  end $fn$`;

/**
 * Detaches every monthly partition whose month ended at or before `before`: its records leave
 * usage_records (and every reader of it) but stay in their own table, for an operator to archive
 * or drop. Returns the partitions detached.
 */
const DETACH_PARTITIONS = `
  create function usage_records_detach_partitions(before timestamptz)
  returns setof text language plpgsql security definer set search_path from current as $fn$
  declare
    part text;
  begin
    for part in
      select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid
      where i.inhparent = 'usage_records'::regclass and c.relname ~ '^usage_records_y[0-9]{4}m[0-9]{2}$'
        and (to_date(substr(c.relname, 16), 'YYYY"m"MM') + interval '1 month') at time zone 'UTC' <= before
      order by c.relname
    loop
      execute format('alter table usage_records detach partition %I', part);
      return next part;
    end loop;
  end $fn$`;
