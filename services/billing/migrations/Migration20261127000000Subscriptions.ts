import { Migration } from "@mikro-orm/migrations";

/**
 * Subscriptions (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md). A row is written
 * `pending` before the saga calls anyone, so its unique keys decide races up front: one attempt per
 * (account, Idempotency-Key) and one live subscription per (account, plan). Failed attempts keep
 * their row (status `failed`) but give both keys back. The plan's terms are copied in at
 * activation, so a hoster's later edit applies from the next renewal. `sealed_api_key` holds the
 * scoped key's secret (SECRETS_KEY) for the 24 h replay window only. Monthly fees are journal
 * entries of kind `subscription_fee`, referenced by subscription and period.
 */
export class Migration20261127000000Subscriptions extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table subscriptions (
        id uuid primary key,
        account_id uuid not null,
        idempotency_key text not null,
        product_id uuid not null,
        status text not null
          check (status in ('pending', 'active', 'paused', 'past_due', 'cancelled', 'failed')),
        hoster_id uuid,
        product_name text,
        hoster_name text,
        pricing_model text check (pricing_model in ('free', 'payg', 'subscription', 'subscription_overage')),
        monthly_price_micros bigint,
        included_tokens bigint,
        input_price_per_1m_micros bigint,
        output_price_per_1m_micros bigint,
        overage_price_per_1m_micros bigint,
        rpm_limit bigint,
        tpm_limit bigint,
        max_concurrent bigint,
        max_output_tokens bigint,
        max_context_tokens bigint,
        period_index integer not null default 0,
        period_start timestamptz,
        period_end timestamptz,
        sealed_api_key text,
        key_requested_at timestamptz,
        key_revoked_at timestamptz,
        failure_code text,
        created_at timestamptz not null,
        activated_at timestamptz,
        cancelled_at timestamptz
      )`);
    this.addSql(
      `create unique index subscriptions_idempotency_idx on subscriptions (account_id, idempotency_key)
       where status <> 'failed'`,
    );
    this.addSql(
      `create unique index subscriptions_one_live_idx on subscriptions (account_id, product_id)
       where status in ('pending', 'active', 'paused', 'past_due')`,
    );
    // The account's list, newest first.
    this.addSql(`create index subscriptions_account_idx on subscriptions (account_id, created_at)`);
    // Renewal picks the subscriptions whose period has ended.
    this.addSql(
      `create index subscriptions_renewal_idx on subscriptions (period_end) where status in ('active', 'paused', 'past_due')`,
    );
    // The janitor: secrets to erase, abandoned and old failed attempts, keys still to revoke.
    this.addSql(`create index subscriptions_sealed_idx on subscriptions (created_at) where sealed_api_key is not null`);
    this.addSql(`create index subscriptions_pending_idx on subscriptions (created_at) where status = 'pending'`);
    this.addSql(`create index subscriptions_failed_idx on subscriptions (created_at) where status = 'failed'`);
    this.addSql(
      `create index subscriptions_unrevoked_idx on subscriptions (created_at)
       where status in ('failed', 'cancelled') and key_requested_at is not null and key_revoked_at is null`,
    );

    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check
       check (kind in ('grant', 'usage', 'top_up', 'subscription_fee'))`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`drop table subscriptions`);
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check check (kind in ('grant', 'usage', 'top_up'))`,
    );
  }
}
