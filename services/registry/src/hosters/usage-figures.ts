import { isUuid } from "@mkt/runtime/ids";
import type { Orm } from "@mkt/runtime/db";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { minutesOf } from "./endpoint-figures.ts";
import type { EndpointMinutesStore } from "./endpoint-minutes-store.ts";
import type { HosterStore } from "./hoster-store.ts";

/** Where a batch's figures go. */
export interface UsageFigureStores {
  store: Pick<HosterStore, "addUsageMismatches">;
  minutes: Pick<EndpointMinutesStore, "add">;
}

/**
 * Writes usage events' figures: each hoster's usage reports that disagreed with the edge's count,
 * and each hoster model's minutes (endpoint-figures.ts). The one write of the usage consumer and
 * of a dead letter's replay. With `em`, both statements are in that transaction. Returns the
 * mismatches written, per hoster (for `mkt_usage_mismatches_total`).
 */
export async function writeUsageFigures(
  stores: UsageFigureStores,
  events: readonly UsageCompleted[],
  now: Date,
  log: Logger,
  em?: Orm["em"],
): Promise<Map<string, number>> {
  const counts = countMismatches(events, log);
  await stores.store.addUsageMismatches(counts, em);
  await stores.minutes.add(minutesOf(events, now), em);
  return counts;
}

/** Mismatched reports per hoster in a batch. */
function countMismatches(events: readonly UsageCompleted[], log: Logger): Map<string, number> {
  const counts = new Map<string, number>();
  for (const event of events) {
    if (event.usageMismatch === "" || event.provider !== "hoster" || !isUuid(event.hosterId)) continue;
    const hosterId = event.hosterId.toLowerCase();
    counts.set(hosterId, (counts.get(hosterId) ?? 0) + 1);
    log.info({ hosterId, reason: event.usageMismatch }, "hoster usage report disagrees with the edge's count");
  }
  return counts;
}
