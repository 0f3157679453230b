import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";
import type { RecordUsageRequest, RecordUsageResponse } from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { settleEvents } from "./settle-events.ts";

/**
 * RecordUsage: the edge hands billing the usage events JetStream did not ack in time. They settle
 * as the consumer's do (settleEvents, keyed on request_id: whichever of this call and the stream
 * comes second finds the request settled and changes nothing), in batches of SETTLE_BATCH_SIZE,
 * and the call answers once every batch is committed, so the edge may forget them.
 */
export async function recordUsage(
  ctx: BillingContext,
  request: RecordUsageRequest,
  log: Logger,
): Promise<RecordUsageResponse> {
  const unnamed = request.events.findIndex((event) => !event.requestId);
  if (unnamed >= 0) {
    throw new AppError("invalid_request", `events[${unnamed}] has no request_id`, { param: "events" });
  }
  const size = ctx.config.SETTLE_BATCH_SIZE;
  for (let start = 0; start < request.events.length; start += size) {
    const outcomes = await settleEvents(ctx, request.events.slice(start, start + size), log);
    log.debug({ events: outcomes.length, outcomes }, "usage recorded by the edge");
  }
  return {};
}
