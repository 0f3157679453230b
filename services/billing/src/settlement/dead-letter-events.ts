import type { Logger } from "@mkt/runtime/logger";
import type { BillingContext } from "../context.ts";
import { countOpenDeadLetters, insertDeadLetters, type DeadLetter } from "@mkt/runtime/usage-dead-letters";

/**
 * Keeps usage events billing cannot settle in usage_dead_letters, each logged at `error` with its
 * reason, and refreshes `mkt_usage_dead_letters`. Resolves once the letters are committed (only
 * then may their messages be acked, or RecordUsage answer); rejects when the database refused
 * them, and the caller lets their messages come again.
 */
export async function deadLetterEvents(
  ctx: BillingContext,
  letters: readonly DeadLetter[],
  log: Logger,
): Promise<void> {
  if (letters.length === 0) return;
  await insertDeadLetters(ctx.orm, letters);
  for (const letter of letters) {
    log.error(
      { requestId: letter.requestId, subject: letter.subject, attempts: letter.attempts, reason: letter.reason },
      "usage event dead-lettered: not charged until replayed (npm run admin -- usage dead-letters)",
    );
  }
  await refreshDeadLetterGauge(ctx, log);
}

/** Sets `mkt_usage_dead_letters` to the letters not replayed yet (the table is shared by billing's replicas). */
export async function refreshDeadLetterGauge(ctx: BillingContext, log: Logger): Promise<void> {
  try {
    ctx.metrics.deadLetters.set(await countOpenDeadLetters(ctx.orm));
  } catch (err) {
    log.warn({ err }, "counting usage dead letters failed");
  }
}
