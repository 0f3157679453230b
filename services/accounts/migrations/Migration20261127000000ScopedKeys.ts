import { Migration } from "@mikro-orm/migrations";

/**
 * One scoped key per subscription: IssueScopedKey is idempotent on the subscription id, and a
 * revocation that arrives before the key (RevokeScopedKey with the secret) takes the same slot,
 * so the key can never be issued after it.
 */
export class Migration20261127000000ScopedKeys extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create unique index api_keys_subscription_idx on api_keys (subscription_id) where subscription_id is not null`,
    );
  }
}
