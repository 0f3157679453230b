import { Migration } from "@mikro-orm/migrations";

/**
 * The rest of a subscription's terms snapshot in its lease budget: the
 * plan's context and output caps and its rpm, which the edge needs to admit a scoped key's
 * request on the lease (docs/architecture.md#admission-on-a-lease) as Authorize did from the
 * subscription row. Budgets opened before this migration get them on their next GrantLease
 * (openBudget refreshes terms).
 */
export class Migration20261224000000LeaseBudgetTerms extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table lease_budgets add column max_context_tokens bigint not null default 0,
      add column max_output_tokens bigint not null default 0, add column rpm_limit bigint not null default 0`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table lease_budgets drop column max_context_tokens, drop column max_output_tokens,
      drop column rpm_limit`);
  }
}
