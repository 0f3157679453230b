import type { Orm } from "@mkt/runtime/db";
import type { Logger } from "@mkt/runtime/logger";
import { listDeadLetters, replayDeadLetters, type ReplayOutcome } from "@mkt/runtime/usage-dead-letter-replay";
import {
  claimDeadLetters,
  countOpenDeadLetters,
  insertDeadLetters,
  type DeadLetter,
} from "@mkt/runtime/usage-dead-letters";
import type { ReplayUsageDeadLettersRequest } from "@mkt/proto/registry/v1/registry";
import type { RegistryMetrics } from "../metrics/registry-metrics.ts";
import { writeUsageFigures, type UsageFigureStores } from "./usage-figures.ts";

/** Letters whose figures one transaction writes on replay (the consumer's batch size). */
const REPLAY_BATCH_SIZE = 500;

/** What registry's usage dead letters need: its database, the figures' stores, its metrics. */
export interface UsageDeadLetterContext {
  orm: Orm;
  figures: UsageFigureStores;
  metrics: Pick<RegistryMetrics, "usageMismatches" | "usageDeadLetters">;
  /** The hosters' clock: the minute an event without a start time is counted in. */
  clock: () => Date;
  log: Logger;
}

/**
 * Keeps usage events the hoster-usage consumer cannot read or write in registry's
 * usage_dead_letters, and refreshes `mkt_usage_dead_letters`. Resolves once they are committed
 * (only then are their messages acked).
 */
export async function deadLetterUsage(ctx: UsageDeadLetterContext, letters: readonly DeadLetter[]): Promise<void> {
  await insertDeadLetters(ctx.orm, letters);
  await refreshDeadLetterGauge(ctx);
}

/** ListUsageDeadLetters: the letters not replayed yet, oldest first (at most 1,000). */
export const listUsageDeadLetters = (ctx: UsageDeadLetterContext) => listDeadLetters(ctx.orm);

/**
 * ReplayUsageDeadLetters: writes the named letters' figures (every open letter's when none is
 * named) through the consumer's own write. Registry's figures are sums, not keyed on request_id,
 * so a replay claims its letters (marks them replayed) in the transaction that writes their
 * figures: a letter is counted once however often it is replayed, by however many calls at once,
 * and a replay that fails writes nothing and leaves its letters open.
 */
export async function replayUsageDeadLetters(
  ctx: UsageDeadLetterContext,
  request: ReplayUsageDeadLettersRequest,
): Promise<ReplayOutcome> {
  const log = ctx.log.child({ component: "hoster-usage" });
  const result = await replayDeadLetters(ctx.orm, request.ids, {
    write: async (items) => {
      const now = ctx.clock();
      const { claimed, counts } = await ctx.orm.em.fork().transactional(async (em) => {
        const claimed = await claimDeadLetters(
          em,
          items.map((item) => item.letter.id),
          now,
        );
        const events = items.filter((item) => claimed.has(item.letter.id)).map((item) => item.event);
        return { claimed, counts: await writeUsageFigures(ctx.figures, events, now, log, em) };
      });
      for (const [hosterId, n] of counts) ctx.metrics.usageMismatches.inc({ hoster_id: hosterId }, n);
      return [...claimed];
    },
    batchSize: REPLAY_BATCH_SIZE,
  });
  await refreshDeadLetterGauge(ctx);
  log.info({ replayed: result.replayed, failed: result.failed.length }, "usage dead letters replayed");
  return result;
}

/** Sets `mkt_usage_dead_letters` to the letters not replayed yet (the table is shared by registry's replicas). */
async function refreshDeadLetterGauge(ctx: UsageDeadLetterContext): Promise<void> {
  try {
    ctx.metrics.usageDeadLetters.set(await countOpenDeadLetters(ctx.orm));
  } catch (err) {
    ctx.log.warn({ err }, "counting usage dead letters failed");
  }
}
