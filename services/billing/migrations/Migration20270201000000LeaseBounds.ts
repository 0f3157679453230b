import { Migration } from "@mikro-orm/migrations";

/**
 * Each lease keeps the EDGE_ISOLATION_MS and MAX_REQUEST_MS it was granted under
 * (docs/leases.md#settings): billing sends its settings in every lease reply and its edges run by
 * them, so a billing restarted with a shorter bound must still close and release the leases
 * granted before by the longer one, or it would release credit under a stream still running.
 * Leases granted before this migration keep null: billing's settings of the moment apply to them,
 * as they did.
 */
export class Migration20270201000000LeaseBounds extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table leases add column isolation_ms integer, add column max_request_ms integer`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table leases drop column isolation_ms, drop column max_request_ms`);
  }
}
