import { Migration } from "@mikro-orm/migrations";

/**
 * A plan's price for input tokens the upstream served from its prompt cache
 * (docs/adr/0039-cached-input-priced-clamped-verified.md). Null means the price it discounts (payg:
 * the input price; subscription_overage: the overage price), so a plan that never set one follows
 * that price; 0 is a price. The check keeps the rule registry enforces true even for a row
 * written by hand: only those two pricing models, never above the price discounted.
 */
export class Migration20270115000000ProductCachedInputPrice extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table products
         add column cached_input_price_per_1m_micros bigint,
         add constraint products_cached_input_price_check check (
           cached_input_price_per_1m_micros is null
           or (cached_input_price_per_1m_micros >= 0
               and case pricing_model
                 when 'payg' then cached_input_price_per_1m_micros <= input_price_per_1m_micros
                 when 'subscription_overage' then cached_input_price_per_1m_micros <= overage_price_per_1m_micros
                 else false
               end))`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`alter table products drop column cached_input_price_per_1m_micros`);
  }
}
