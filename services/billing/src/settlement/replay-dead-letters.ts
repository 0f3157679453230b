import type { Logger } from "@mkt/runtime/logger";
import { listDeadLetters, replayDeadLetters } from "@mkt/runtime/usage-dead-letter-replay";
import { markReplayed } from "@mkt/runtime/usage-dead-letters";
import type {
  ListUsageDeadLettersResponse,
  ReplayUsageDeadLettersRequest,
  ReplayUsageDeadLettersResponse,
} from "@mkt/proto/billing/v1/billing";
import type { BillingContext } from "../context.ts";
import { refreshDeadLetterGauge } from "./dead-letter-events.ts";
import { settleEvents } from "./settle-events.ts";
import { unrecordableReason } from "./usage-without-charge.ts";

/** ListUsageDeadLetters: the letters not replayed yet, oldest first. */
export async function listUsageDeadLetters(ctx: BillingContext): Promise<ListUsageDeadLettersResponse> {
  return listDeadLetters(ctx.orm);
}

/**
 * ReplayUsageDeadLetters: settles the named letters (every open one when none is named) through
 * the one settlement (settleEvents, keyed on request_id, so a request settled meanwhile is a
 * duplicate that changes nothing), and marks replayed those whose events settled. A letter that
 * still does not decode, cannot be recorded or fails to settle stays open with its new reason.
 */
export async function replayUsageDeadLetters(
  ctx: BillingContext,
  request: ReplayUsageDeadLettersRequest,
  log: Logger,
): Promise<ReplayUsageDeadLettersResponse> {
  const result = await replayDeadLetters(ctx.orm, request.ids, {
    refuse: unrecordableReason,
    write: async (items) => {
      await settleEvents(
        ctx,
        items.map((item) => item.event),
        log,
      );
      // Marked after: settlement is idempotent on request_id, so a replay that died in between
      // settles nothing twice when run again.
      const ids = items.map((item) => item.letter.id);
      await markReplayed(ctx.orm, ids, ctx.clock());
      return ids;
    },
    batchSize: ctx.config.SETTLE_BATCH_SIZE,
  });
  await refreshDeadLetterGauge(ctx, log);
  log.info({ replayed: result.replayed, failed: result.failed.length }, "usage dead letters replayed");
  return result;
}
