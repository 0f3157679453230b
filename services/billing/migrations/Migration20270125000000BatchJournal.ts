import { Migration } from "@mikro-orm/migrations";

/**
 * One journal entry per settled batch (docs/adr/0040-one-journal-entry-per-settled-batch.md).
 *
 * A settled batch posts one `usage_batch` entry, referenced by a fresh id of its own, whose legs
 * are per account the sums over the usage records the batch inserted. A usage record names that
 * entry (`entry_id`, null for a request charged nothing, and for records settled before, whose
 * per-request `usage` entry is referenced by their request id and stays valid history) and keeps
 * what the platform wrote off of its cost (`write_off_micros`), so each leg can be checked against
 * its records. No foreign key: the entry and its records are inserted by one statement
 * (SettlementWrites), and its check would cost a lookup and a lock per record.
 *
 * A posting is keyed on (entry, leg account): no entry posts to one account twice, so the random
 * id and the index on `entry_id` alone (the key's prefix now) go, one index entry fewer per leg.
 */
export class Migration20270125000000BatchJournal extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check
       check (kind in ('grant', 'usage', 'top_up', 'subscription_fee', 'write_off', 'usage_batch'))`,
    );
    this.addSql(
      `alter table usage_records add column entry_id uuid,
         add column write_off_micros bigint not null default 0,
         add constraint usage_records_write_off_micros_check check (write_off_micros between 0 and cost_micros)`,
    );
    this.addSql(`alter table ledger_postings drop constraint ledger_postings_pkey`);
    this.addSql(`alter table ledger_postings drop column id`);
    this.addSql(`alter table ledger_postings add primary key (entry_id, ledger_account)`);
    this.addSql(`drop index ledger_postings_entry_idx`);
  }

  override async down(): Promise<void> {
    this.addSql(`create index ledger_postings_entry_idx on ledger_postings (entry_id)`);
    this.addSql(`alter table ledger_postings drop constraint ledger_postings_pkey`);
    this.addSql(`alter table ledger_postings add column id uuid not null default gen_random_uuid() primary key`);
    this.addSql(`alter table ledger_postings alter column id drop default`);
    this.addSql(`alter table usage_records drop column write_off_micros, drop column entry_id`);
    this.addSql(`alter table journal_entries drop constraint journal_entries_kind_check`);
    this.addSql(
      `alter table journal_entries add constraint journal_entries_kind_check
       check (kind in ('grant', 'usage', 'top_up', 'subscription_fee', 'write_off'))`,
    );
  }
}
