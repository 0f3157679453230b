import { defineEntity, p } from "@mikro-orm/core";

/**
 * A usage.completed event JetStream did not ack in time (docs/usage-outbox.md): the encoded event
 * as it would have been published, kept until a replay is acked. Rows are written only while
 * JetStream is unreachable or slow; the table is empty otherwise.
 */
export const UsageOutboxEvent = defineEntity({
  name: "UsageOutboxEvent",
  tableName: "usage_outbox",
  properties: {
    id: p.bigint("bigint").primary(),
    /** The Nats-Msg-Id of the replay: JetStream and billing drop a second copy. */
    requestId: p.text(),
    /** The UsageCompleted protobuf, byte for byte. */
    payload: p.blob(),
    createdAt: p.datetime(),
  },
});
