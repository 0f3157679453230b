import { Migration } from "@mikro-orm/migrations";

/**
 * What settling a request costs PostgreSQL, without changing what is stored.
 *
 * `ledger_postings.entry_id` loses its foreign key: every posting is inserted by the statement
 * that inserts its journal entry, joined to the entries that statement returned (journalCtes in
 * services/billing/src/wallets/ledger.ts, the only writer of postings), so no posting can name a
 * missing entry, and entries are never deleted. The check cost a lookup and a row lock (a WAL
 * record) per posting: two or three per settled request.
 *
 * `leases` keeps 30% of each page free: every settle batch updates the hold of each lease it
 * settles on, and heartbeats update them too; with room on the page PostgreSQL updates a row in
 * place of its page (a HOT update) instead of adding an entry to each of the table's four
 * indexes.
 */
export class Migration20261231000000SettlementWriteCost extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table ledger_postings drop constraint ledger_postings_entry_id_fkey`);
    this.addSql(`alter table leases set (fillfactor = 70)`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table leases reset (fillfactor)`);
    this.addSql(
      `alter table ledger_postings add constraint ledger_postings_entry_id_fkey
       foreign key (entry_id) references journal_entries (id)`,
    );
  }
}
