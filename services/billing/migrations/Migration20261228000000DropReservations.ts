import { Migration } from "@mikro-orm/migrations";

/**
 * The per-request Authorize path is gone (docs/adr/0007-admission-leases.md): every chat request is
 * admitted on an admission lease, so `reservations` and the usage records' link to it go.
 *
 * A reservation still held when this runs (a request in flight across the upgrade) gives its hold
 * back to the wallet first, so `wallets.held_micros` stays the sum of the leases' holds and the
 * reported balance stays true. Its usage event then carries no lease id and is recorded at no
 * cost (the platform absorbs that one request, as it would a lost event). The ledger is not
 * touched: postings reference requests, never reservations.
 *
 * `down` recreates the table empty (its rows are not kept) and the column as null.
 */
export class Migration20261228000000DropReservations extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      update wallets w set held_micros = w.held_micros - h.held
      from (select account_id, sum(reserved_micros) as held from reservations where status = 'held'
        group by account_id) h
      where w.account_id = h.account_id`);
    this.addSql(`drop table reservations`);
    this.addSql(`alter table usage_records drop column reservation_id`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table usage_records add column reservation_id uuid`);
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
        expires_at timestamptz not null,
        subscription_id uuid,
        pricing_model text,
        period_index integer,
        included_tokens bigint,
        overage_price_per_1m_micros bigint,
        included_claim bigint not null default 0
      )`);
    this.addSql(`create index reservations_held_expiry_idx on reservations (expires_at) where status = 'held'`);
    this.addSql(`create index reservations_account_idx on reservations (account_id, created_at)`);
    this.addSql(
      `create index reservations_subscription_held_idx on reservations (subscription_id) where status = 'held'`,
    );
  }
}
