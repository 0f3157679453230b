import { Migration } from "@mikro-orm/migrations";

/**
 * A subscription's requests are priced and limited by its plan
 * (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md).
 *
 * Reservations of a scoped key carry what their settlement needs, so settlement never reads the
 * subscription again: the subscription, its pricing model, the period they count in, the period's
 * included tokens, the overage price, and `included_claim`, the tokens of the allowance the
 * request's worst case may use (it sizes the other in-flight requests' holds).
 *
 * `subscription_usage` is a period's use: tokens settled and overage tokens charged. It is keyed
 * on the period index, so a renewal (which bumps the index) starts from zero with no write.
 * `subscription_rate_counters` count a subscriber's requests and worst-case tokens per UTC
 * calendar minute (rpm, tpm), like the account tier's `rate_counters`.
 */
export class Migration20261128000000PlanLimits extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table reservations
        add column subscription_id uuid,
        add column pricing_model text,
        add column period_index integer,
        add column included_tokens bigint,
        add column overage_price_per_1m_micros bigint,
        add column included_claim bigint not null default 0`);
    // A subscriber's requests in flight: concurrency slots and allowance claims.
    this.addSql(
      `create index reservations_subscription_held_idx on reservations (subscription_id) where status = 'held'`,
    );
    this.addSql(`
      create table subscription_usage (
        subscription_id uuid not null,
        period_index integer not null,
        used_tokens bigint not null default 0 check (used_tokens >= 0),
        overage_tokens bigint not null default 0 check (overage_tokens >= 0),
        primary key (subscription_id, period_index)
      )`);
    this.addSql(`
      create table subscription_rate_counters (
        subscription_id uuid not null,
        window_start timestamptz not null,
        requests bigint not null default 0,
        tokens bigint not null default 0,
        primary key (subscription_id, window_start)
      )`);
  }

  override async down(): Promise<void> {
    this.addSql(`drop table subscription_rate_counters`);
    this.addSql(`drop table subscription_usage`);
    this.addSql(`drop index reservations_subscription_held_idx`);
    this.addSql(`
      alter table reservations
        drop column subscription_id, drop column pricing_model, drop column period_index,
        drop column included_tokens, drop column overage_price_per_1m_micros, drop column included_claim`);
  }
}
