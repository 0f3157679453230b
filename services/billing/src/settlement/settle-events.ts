import type { Logger } from "@mkt/runtime/logger";
import type { Micros } from "@mkt/runtime/money";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { BillingContext } from "../context.ts";
import { withDeadlockRetry } from "../leases/deadlock-retry.ts";
import { recordSettlement } from "../metrics/settlement-metrics.ts";
import { settleUsageBatch } from "./settle-batch.ts";
import type { SettleOutcome } from "./usage-without-charge.ts";

const orderKey = (event: UsageCompleted) => `${event.accountId}/${event.requestId}`;

/**
 * Settles one batch of usage.completed events in one transaction and counts it in the metrics
 * once committed: the one way events are settled, whether they came from the JetStream consumer
 * or from the edge's RecordUsage call. `publishedNanos` are the events' JetStream publish times
 * for the settlement lag (none for events that did not come through JetStream). Returns the
 * outcomes in account and request order, the order the events settled in.
 */
export async function settleEvents(
  ctx: BillingContext,
  events: readonly UsageCompleted[],
  log: Logger,
  publishedNanos: readonly number[] = [],
): Promise<SettleOutcome[]> {
  // A stable order (settleUsageBatch also locks the wallets in account order up front).
  const ordered = [...events].sort((a, b) => (orderKey(a) < orderKey(b) ? -1 : 1));
  const now = ctx.clock();
  // Filled inside the transaction, counted only once it has committed (a failed batch is retried).
  let writtenOff: Micros[] = [];
  // A deadlock victim runs again whole.
  const outcomes = await withDeadlockRetry(() => {
    writtenOff = [];
    return ctx.orm.em.fork().transactional((em) => settleUsageBatch(em, ordered, log, now, writtenOff));
  });
  recordSettlement(ctx.metrics, outcomes, publishedNanos, writtenOff);
  return outcomes;
}
