import { Migration } from "@mikro-orm/migrations";

/**
 * Which edges may hold a key's principal in their cache, and until when
 * (docs/adr/0018-revocation-waits-for-the-edges.md): a revocation waits for the acks of these edges
 * only. Written by Authenticate and RevalidateKeys.
 */
export class Migration20261202000000KeyHolders extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table key_holders (
      key_id uuid not null references api_keys (id) on delete cascade,
      edge_id text not null,
      holds_until timestamptz not null,
      primary key (key_id, edge_id)
    )`);
    this.addSql(`create index key_holders_until_idx on key_holders (holds_until)`);
  }
}
