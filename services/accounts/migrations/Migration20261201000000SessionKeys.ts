import { Migration } from "@mikro-orm/migrations";

/**
 * Session keys (the portal's playground): a key minted for one login session, which stops at
 * the session's end and is revoked at logout. Other keys leave both columns null.
 */
export class Migration20261201000000SessionKeys extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table api_keys add column session_id uuid null, add column expires_at timestamptz null`);
    this.addSql(`create index api_keys_session_idx on api_keys (session_id) where session_id is not null`);
  }
}
