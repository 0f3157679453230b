import { Migration } from "@mikro-orm/migrations";

/**
 * Prompt caching priced (docs/adr/0039-cached-input-priced-clamped-verified.md): a subscription's
 * terms snapshot and its lease budgets keep the plan's cached-input price (null: the input price,
 * or the overage price on an overage plan; 0 is a price); a usage record keeps the input tokens
 * the upstream served from its cache and the output tokens it spent reasoning, each a part of its
 * own total, and the hourly rollup sums the cached ones for the reports.
 */
export class Migration20270115000000CachedInput extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table subscriptions add column cached_input_price_per_1m_micros bigint`);
    this.addSql(`alter table lease_budgets add column cached_input_price_per_1m_micros bigint`);
    this.addSql(
      `alter table usage_records add column cached_input_tokens bigint not null default 0,
         add column reasoning_tokens bigint not null default 0,
         add constraint usage_records_cached_input_tokens_check check (cached_input_tokens between 0 and input_tokens),
         add constraint usage_records_reasoning_tokens_check check (reasoning_tokens between 0 and output_tokens)`,
    );
    this.addSql(`alter table usage_hourly add column cached_input_tokens bigint not null default 0`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table usage_hourly drop column cached_input_tokens`);
    this.addSql(`alter table usage_records drop column reasoning_tokens, drop column cached_input_tokens`);
    this.addSql(`alter table lease_budgets drop column cached_input_price_per_1m_micros`);
    this.addSql(`alter table subscriptions drop column cached_input_price_per_1m_micros`);
  }
}
