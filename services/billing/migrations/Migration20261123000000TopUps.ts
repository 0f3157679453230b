import { Migration } from "@mikro-orm/migrations";

/**
 * Operator top-ups are journal entries of kind 'top_up', referenced by account and
 * Idempotency-Key, so the (kind, reference) unique key makes a retried top-up credit once.
 */
export class Migration20261123000000TopUps extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check check (kind in ('grant', 'usage', 'top_up'))`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check check (kind in ('grant', 'usage'))`,
    );
  }
}
