import { Migration } from "@mikro-orm/migrations";

/**
 * Edge incarnations: an edge keeps its id (EDGE_ID) across restarts, and each process that starts
 * under it takes the next `incarnation` on its first lease call, which closes the older
 * incarnations' leases at once (docs/leases.md, "Incarnations"). `boot_id` is the random id the
 * incarnation's process drew at start: its other first calls in flight find it and share the
 * incarnation. Rows from before have incarnation 0 and no boot id.
 */
export class Migration20270105000000EdgeIncarnations extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table edge_sessions add column incarnation bigint not null default 0`);
    this.addSql(`alter table edge_sessions add column boot_id text not null default ''`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table edge_sessions drop column boot_id`);
    this.addSql(`alter table edge_sessions drop column incarnation`);
  }
}
