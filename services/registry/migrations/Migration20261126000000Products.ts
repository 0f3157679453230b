import { Migration } from "@mikro-orm/migrations";

/**
 * Hosters' plans ("products"). Prices are integer micro-USD (per 1M tokens, or per period); a
 * price that does not apply to the plan's pricing model is 0. Limits are stored resolved (the
 * defaults are applied before the insert), so readers never need to know them. A plan is never
 * deleted: subscriptions keep referring to it; `archived` only stops new subscriptions.
 */
export class Migration20261126000000Products extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table products (
        id uuid primary key,
        hoster_id uuid not null references hosters (id),
        name text not null,
        description text not null default '',
        pricing_model text not null
          check (pricing_model in ('free', 'payg', 'subscription', 'subscription_overage')),
        monthly_price_micros bigint not null default 0 check (monthly_price_micros >= 0),
        included_tokens bigint not null default 0 check (included_tokens >= 0),
        input_price_per_1m_micros bigint not null default 0 check (input_price_per_1m_micros >= 0),
        output_price_per_1m_micros bigint not null default 0 check (output_price_per_1m_micros >= 0),
        overage_price_per_1m_micros bigint not null default 0 check (overage_price_per_1m_micros >= 0),
        rpm_limit bigint not null check (rpm_limit > 0),
        tpm_limit bigint not null check (tpm_limit > 0),
        max_concurrent bigint not null check (max_concurrent > 0),
        max_output_tokens bigint not null check (max_output_tokens > 0),
        max_context_tokens bigint not null check (max_context_tokens > 0),
        status text not null default 'active' check (status in ('active', 'archived')),
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        archived_at timestamptz
      )`);
    // A hoster's own list (all its plans) and the public list (active plans), oldest first.
    this.addSql(`create index products_hoster_idx on products (hoster_id, created_at)`);
    this.addSql(`create index products_active_idx on products (hoster_id, created_at) where status = 'active'`);
  }
}
