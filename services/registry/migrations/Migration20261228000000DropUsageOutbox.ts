import { Migration } from "@mikro-orm/migrations";

/**
 * The usage outbox goes with the relay it served: the edges publish usage now (and hand it to
 * billing's RecordUsage when JetStream does not ack). Events still in it were never settled, so
 * the migration refuses to drop a table that holds any: run the previous release until its
 * replayer has emptied it (docs/deploy.md, "Upgrading to the edge relay").
 */
export class Migration20261228000000DropUsageOutbox extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      do $$
      begin
        if exists (select 1 from usage_outbox) then
          raise exception 'usage_outbox still holds events: run the previous release until its replayer empties it';
        end if;
      end $$`);
    this.addSql(`drop table usage_outbox`);
  }
}
