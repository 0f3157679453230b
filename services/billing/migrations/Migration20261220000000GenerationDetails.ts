import { Migration } from "@mikro-orm/migrations";

/**
 * GET /v1/generations/{id} shows a request's time to first token and how its answer ended, which
 * usage.completed now carries. Records settled before have neither: null and ''.
 */
export class Migration20261220000000GenerationDetails extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table usage_records add column time_to_first_token_ms bigint`);
    this.addSql(`alter table usage_records add column finish_reason text not null default ''`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table usage_records drop column finish_reason`);
    this.addSql(`alter table usage_records drop column time_to_first_token_ms`);
  }
}
