import { Migration } from "@mikro-orm/migrations";

/**
 * Usage events billing could not decode, record or settle, kept instead of dropped
 * (docs/settlement.md#dead-letters): one row per event, its encoded bytes as they came, until an
 * operator replays it. `letter_key` is the event's request id, or the digest of bytes that name
 * none, so the same event dead-lettered again (a redelivery, a second RecordUsage) updates its row.
 */
export class Migration20270203000000UsageDeadLetters extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table usage_dead_letters (
        id uuid primary key default gen_random_uuid(),
        letter_key text not null unique,
        request_id text,
        subject text not null,
        data bytea not null,
        reason text not null,
        attempts int not null check (attempts >= 1),
        first_seen_at timestamptz not null default now(),
        last_seen_at timestamptz not null default now(),
        replayed_at timestamptz
      )`);
    this.addSql(
      `create index usage_dead_letters_open_idx on usage_dead_letters (first_seen_at) where replayed_at is null`,
    );
  }

  override async down(): Promise<void> {
    this.addSql(`drop table usage_dead_letters`);
  }
}
