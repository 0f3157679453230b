import { Migration } from "@mikro-orm/migrations";

/**
 * How often a hoster's usage reports disagreed with the registry's own count beyond the tolerance
 * (docs/adr/0023-usage-mismatches-flagged-not-punished.md). Only ever incremented (in batches, off
 * the request path); shown to the hoster in /hosters/me and to the operator, not in the public
 * hoster list.
 */
export class Migration20261127120000HosterUsageMismatches extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table hosters add column usage_mismatches bigint not null default 0 check (usage_mismatches >= 0)`,
    );
  }
}
