/**
 * What a JetStream message on `usage.completed` holds: a UsageBatch of encoded events (what edges
 * publish, marked by the USAGE_BATCH_HEADER), or one bare UsageCompleted (what edges published
 * before batches, still read during an upgrade: docs/adr/0043-usage-events-batched-per-publish.md).
 * Billing and registry read messages through here, one way, and each event stays its own bytes so
 * that one they cannot decode is dead-lettered alone.
 */
import type { MsgHdrs } from "@nats-io/transport-node";
import { UsageBatch, UsageCompleted } from "@mkt/proto/events/v1/events";

/** The header that says a message is a UsageBatch; a message without it is one UsageCompleted. */
export const USAGE_BATCH_HEADER = "Mkt-Usage-Batch";

/** One event of a message: its encoded bytes and its chat request's traceparent ('' when none). */
export interface UsageItem {
  data: Uint8Array;
  traceparent: string;
}

/**
 * The events of one message, in order. Throws when the message is marked a batch and its batch
 * cannot be read: then no event of it can be told apart from another, and the whole message is
 * one dead letter.
 */
export function usageItems(data: Uint8Array, headers: MsgHdrs | undefined): UsageItem[] {
  if (headers?.get(USAGE_BATCH_HEADER) !== "1") {
    return [{ data, traceparent: headers?.get("traceparent") ?? "" }];
  }
  const batch = UsageBatch.decode(data);
  return batch.events.map((event, i) => ({ data: event, traceparent: batch.traceparents[i] ?? "" }));
}

/** One event's bytes as a UsageCompleted; throws when they do not decode. */
export function decodeUsageEvent(data: Uint8Array): UsageCompleted {
  return UsageCompleted.decode(data);
}

/** The message id of a batch: unique per edge process and batch, fixed when the batch is made. */
export function usageBatchId(batch: Pick<UsageBatch, "edgeId" | "bootId" | "sequence">): string {
  return `${batch.edgeId}.${batch.bootId}.${batch.sequence}`;
}
