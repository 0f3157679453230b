import { Migration } from "@mikro-orm/migrations";

/**
 * Billing's initial schema. Money is bigint micro-USD everywhere. Unique keys carry the
 * exactly-once rules: one starting grant per account and one charge per request_id
 * (journal_entries), one reservation and one usage record per request_id.
 */
export class Migration20261122000000Initial extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table wallets (
        account_id uuid primary key,
        posted_micros bigint not null default 0,
        held_micros bigint not null default 0 check (held_micros >= 0),
        created_at timestamptz not null default now()
      )`);

    // A journal entry is one balanced movement; (kind, reference) makes it exactly-once:
    // kind 'grant' is referenced by account id, kind 'usage' by request id.
    this.addSql(`
      create table journal_entries (
        id uuid primary key,
        kind text not null check (kind in ('grant', 'usage')),
        reference text not null,
        created_at timestamptz not null default now(),
        unique (kind, reference)
      )`);

    // Ledger accounts are named 'customer:<account_id>', 'hoster:<hoster_id>', 'platform:grants',
    // 'platform:revenue'. The postings of one entry sum to zero.
    this.addSql(`
      create table ledger_postings (
        id uuid primary key,
        entry_id uuid not null references journal_entries (id),
        ledger_account text not null,
        amount_micros bigint not null,
        created_at timestamptz not null default now()
      )`);
    this.addSql(`create index ledger_postings_account_idx on ledger_postings (ledger_account, created_at)`);
    this.addSql(`create index ledger_postings_entry_idx on ledger_postings (entry_id)`);

    this.addSql(`
      create table reservations (
        id uuid primary key,
        request_id text not null unique,
        account_id uuid not null references wallets (account_id),
        key_id text not null,
        model_id text not null,
        provider text not null,
        hoster_id text not null default '',
        input_price_per_1m_micros bigint not null,
        output_price_per_1m_micros bigint not null,
        input_tokens bigint not null,
        max_output_tokens bigint not null,
        reserved_micros bigint not null check (reserved_micros >= 0),
        status text not null check (status in ('held', 'settled', 'expired')),
        slot_released_at timestamptz,
        created_at timestamptz not null,
        expires_at timestamptz not null
      )`);
    // The sweeper scans only what is still held.
    this.addSql(`create index reservations_held_expiry_idx on reservations (expires_at) where status = 'held'`);
    this.addSql(`create index reservations_account_idx on reservations (account_id, created_at)`);

    this.addSql(`
      create table usage_records (
        request_id text primary key,
        reservation_id uuid,
        account_id uuid not null,
        key_id text not null,
        model_id text not null,
        provider text not null,
        hoster_id text not null default '',
        input_tokens bigint not null,
        output_tokens bigint not null,
        cost_micros bigint not null,
        platform_fee_micros bigint not null,
        hoster_earned_micros bigint not null,
        latency_ms bigint not null,
        success boolean not null,
        error_code text not null default '',
        created_at timestamptz not null
      )`);
    this.addSql(`create index usage_records_account_idx on usage_records (account_id, created_at)`);

    this.addSql(`
      create table usage_hourly (
        account_id uuid not null,
        hour timestamptz not null,
        model_id text not null,
        provider text not null,
        requests bigint not null default 0,
        input_tokens bigint not null default 0,
        output_tokens bigint not null default 0,
        cost_micros bigint not null default 0,
        platform_fee_micros bigint not null default 0,
        hoster_earned_micros bigint not null default 0,
        latency_ms_sum bigint not null default 0,
        failed bigint not null default 0,
        primary key (account_id, hour, model_id, provider)
      )`);

    this.addSql(`
      create table rate_counters (
        account_id uuid not null,
        "window" text not null check ("window" in ('minute', 'day')),
        window_start timestamptz not null,
        count bigint not null default 0,
        primary key (account_id, "window", window_start)
      )`);
  }
}
