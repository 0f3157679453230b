import { Migration } from "@mikro-orm/migrations";

/**
 * The usage export pages through an account's records by keyset (created_at, request_id); with
 * request_id in the index every page is one range scan, ties on created_at included. It covers
 * every query of the old (account_id, created_at) index, which it replaces. Reports read the
 * hourly rollups, whose primary key (account_id, hour, ...) already serves their range scans.
 */
export class Migration20261124000000UsageExportIndex extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create index usage_records_account_time_idx on usage_records (account_id, created_at, request_id)`);
    this.addSql(`drop index usage_records_account_idx`);
  }

  override async down(): Promise<void> {
    this.addSql(`create index usage_records_account_idx on usage_records (account_id, created_at)`);
    this.addSql(`drop index usage_records_account_time_idx`);
  }
}
