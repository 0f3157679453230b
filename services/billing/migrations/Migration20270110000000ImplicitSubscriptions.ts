import { Migration } from "@mikro-orm/migrations";

/**
 * Implicit subscriptions: an account's first call to an open plan makes its subscription to it,
 * `origin = 'open'` (no key, no fee); those made by POST /v1/subscriptions are `subscribed`. A lease
 * budget keeps the plan it is for, so an edge finds the budget of an open endpoint's plan.
 */
export class Migration20270110000000ImplicitSubscriptions extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table subscriptions add column origin text not null default 'subscribed'`);
    this.addSql(
      `alter table subscriptions add constraint subscriptions_origin_check check (origin in ('subscribed', 'open'))`,
    );
    this.addSql(`alter table lease_budgets add column product_id uuid`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table lease_budgets drop column product_id`);
    this.addSql(`alter table subscriptions drop column origin`);
  }
}
