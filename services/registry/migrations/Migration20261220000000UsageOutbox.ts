import { Migration } from "@mikro-orm/migrations";

/**
 * Registry's usage outbox (dropped since the relay moved into the edge): usage.completed events JetStream did not ack
 * within USAGE_PUBLISH_TIMEOUT_MS, kept until a replay is acked. Not keyed on request_id: the
 * replay's Nats-Msg-Id and billing's unique request_id drop copies, so a row written twice (an
 * insert retried after a lost reply) costs nothing, and an event without a request id still
 * gets a row.
 */
export class Migration20261220000000UsageOutbox extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table usage_outbox (
        id bigint generated always as identity primary key,
        request_id text not null,
        payload bytea not null,
        created_at timestamptz not null default now()
      )`);
  }
}
