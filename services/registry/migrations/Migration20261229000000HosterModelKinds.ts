import { Migration } from "@mikro-orm/migrations";

/**
 * What a hoster's model answers (`chat`, or `embedding` for POST /v1/embeddings) and the most
 * choices (`n`) one chat request may ask of it. Models registered before default to a chat model
 * of one choice, which is what the edge assumed of them.
 */
export class Migration20261229000000HosterModelKinds extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table hoster_models
         add column kind text not null default 'chat' check (kind in ('chat', 'embedding')),
         add column max_n integer not null default 1 check (max_n between 1 and 128)`,
    );
  }
}
