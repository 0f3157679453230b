import type { Logger } from "@mkt/runtime/logger";
import { repeatEvery } from "@mkt/runtime/periodic";
import type { Em } from "../context.ts";

/** Months whose partitions exist ahead of the current one, so a month starts with its own. */
export const PARTITION_MONTHS_AHEAD = 2;

/** How often each replica looks (the work is a catalog lookup unless a month is due). */
const MAINTENANCE_INTERVAL_MS = 3_600_000;

export interface PartitionChanges {
  /** Partitions made (usage_records_yYYYYmMM). */
  made: string[];
  /** Partitions detached past the retention. */
  detached: string[];
}

/** The first instant of the UTC month `months` after `at`'s (before, when negative). */
const monthStart = (at: Date, months: number) => new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + months, 1));

/**
 * Keeps usage_records' monthly partitions (docs/settlement.md#usage-records-by-month): makes the
 * current month's and the next PARTITION_MONTHS_AHEAD months' where missing, and, with a retention
 * of `retentionMonths` (0 keeps everything), detaches every month that ended before the start of
 * the month `retentionMonths` before the current one: the current month and the
 * `retentionMonths` before it stay. Both are functions the migration made, run as the schema's
 * owner, idempotent, and safe for two replicas at once.
 */
export async function maintainUsagePartitions(em: Em, now: Date, retentionMonths: number): Promise<PartitionChanges> {
  const made = await em.execute<Array<{ name: string }>>(
    `select usage_records_add_partitions(?::timestamptz, ?::timestamptz) as name`,
    [now.toISOString(), monthStart(now, PARTITION_MONTHS_AHEAD).toISOString()],
  );
  const detached =
    retentionMonths > 0
      ? await em.execute<Array<{ name: string }>>(`select usage_records_detach_partitions(?::timestamptz) as name`, [
          monthStart(now, -retentionMonths).toISOString(),
        ])
      : [];
  return { made: made.map((r) => r.name), detached: detached.map((r) => r.name) };
}

/**
 * The partition maintenance of one replica: once at start (not waited for: the default partition
 * takes any record meanwhile) and then every hour. Returns its stop function.
 */
export function startUsagePartitions(
  fork: () => Em,
  clock: () => Date,
  retentionMonths: number,
  log: Logger,
): () => Promise<void> {
  const run = async () => {
    const changes = await maintainUsagePartitions(fork(), clock(), retentionMonths);
    if (changes.made.length > 0) log.info({ partitions: changes.made }, "usage record partitions made");
    if (changes.detached.length > 0) {
      log.warn(
        { partitions: changes.detached, retentionMonths },
        "usage record partitions detached past USAGE_RETENTION_MONTHS (their tables remain)",
      );
    }
  };
  const first = run().catch((err: unknown) => log.error({ err }, "usage partition maintenance failed"));
  const stop = repeatEvery(MAINTENANCE_INTERVAL_MS, run, log, "usage partition maintenance");
  return async () => {
    await first;
    await stop();
  };
}
