import type { Logger } from "@mkt/runtime/logger";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { RecordUsageRequest, RecordUsageResponse } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { deadLetterEvents } from "./dead-letter-events.ts";
import { settleEvents } from "./settle-events.ts";
import { RECORD_USAGE_SUBJECT, type DeadLetter } from "@mkt/runtime/usage-dead-letters";
import { unrecordableReason } from "./usage-without-charge.ts";

/**
 * RecordUsage: the edge hands billing the events of a usage batch JetStream did not ack in time.
 * They settle as the consumer's do (settleEvents, keyed on request_id: whichever of this call and
 * the stream comes second finds the request settled and changes nothing), in batches of
 * SETTLE_BATCH_SIZE, and the call answers once every batch is committed, so the edge may forget
 * them. An event that can never be recorded (no request id, no valid account) is dead-lettered
 * and the rest of the call settles: refusing the whole call would have the edge retry all of it
 * forever. A settlement failure fails the call (the edge retries it; nothing settled twice).
 */
export async function recordUsage(
  ctx: BillingContext,
  request: RecordUsageRequest,
  log: Logger,
): Promise<RecordUsageResponse> {
  const letters: DeadLetter[] = [];
  const events = request.events.filter((event) => {
    const reason = unrecordableReason(event);
    if (reason === undefined) return true;
    letters.push({
      subject: RECORD_USAGE_SUBJECT,
      data: UsageCompleted.encode(event).finish(),
      reason,
      attempts: 1,
      ...(event.requestId ? { requestId: event.requestId } : {}),
    });
    return false;
  });
  await deadLetterEvents(ctx, letters, log);
  const size = ctx.config.SETTLE_BATCH_SIZE;
  for (let start = 0; start < events.length; start += size) {
    const outcomes = await settleEvents(ctx, events.slice(start, start + size), log);
    log.debug({ events: outcomes.length, outcomes }, "usage recorded by the edge");
  }
  return {};
}
