import { isUuid } from "@mkt/runtime/ids";
import type { Micros } from "@mkt/runtime/money";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { sql } from "kysely";
import { billingDb } from "../billing-db.ts";
import type { Em } from "../context.ts";
import { leasesWithIds, lockLeaseWallets, toLeaseRow, type LeaseRow } from "../leases/lease-store.ts";
import { settleLeaseUsage, type SettlementBatch } from "./settle-lease-usage.ts";
import { SettlementWrites } from "./settlement-writes.ts";
import { recordTime, recordWithoutCharge, type SettleOutcome } from "./usage-without-charge.ts";

/**
 * Settles a batch of usage.completed events inside the caller's transaction, in order, keyed on
 * request_id: each against the lease it was admitted on (settleLeaseUsage), the same request
 * twice in one batch (replayed under another message id) settling once.
 *
 * A batch costs three statements whatever its size, so settlement's cost per request falls as
 * batches grow, and the wallet locks it takes are held for milliseconds, so the lease calls
 * waiting on them (grants, heartbeats) are not held up behind it:
 * 1. every wallet the batch charges is locked, in account order (settling event by event would
 *    take them in the batch's order, which two settlers, or a settler and RecordUsage, could
 *    cross);
 * 2. then, so that whatever a fence, the closer or another settler committed before is seen, its
 *    leases (with their allowances and budgets) and the requests among its events that already
 *    have a usage record are read (readBatch);
 * 3. the events settle in memory, and SettlementWrites writes everything they change in one
 *    set-based statement.
 * An event without a lease id (no edge sends one: every request is admitted on a lease) is
 * recorded at no cost, like one naming an unknown lease. Write-offs are pushed on `writtenOff`.
 */
export async function settleUsageBatch(
  em: Em,
  received: readonly UsageCompleted[],
  log: Logger,
  now: Date,
  writtenOff: Micros[] = [],
): Promise<SettleOutcome[]> {
  if (received.length === 0) return [];
  // The record keeps the id as PostgreSQL prints a uuid (lower case); the batch compares it so too.
  const events = received.map((e) => {
    const requestId = e.requestId.toLowerCase();
    return requestId === e.requestId ? e : { ...e, requestId };
  });
  const leaseIds = [...new Set(events.map((e) => e.leaseId).filter(isUuid))];
  const wallets = await lockLeaseWallets(em, leaseIds);
  const { leases, recorded } = await readBatch(em, leaseIds, events);
  const batch: SettlementBatch = { leases, wallets, recorded, writes: new SettlementWrites(), writtenOff };
  const outcomes: SettleOutcome[] = [];
  const seen = new Set<string>();
  for (const event of events) {
    if (seen.has(event.requestId)) {
      outcomes.push("duplicate");
      continue;
    }
    seen.add(event.requestId);
    outcomes.push(
      event.leaseId
        ? settleLeaseUsage(event, log, now, batch)
        : recordWithoutCharge(batch.writes, batch.recorded, event, log),
    );
  }
  const written = await batch.writes.flush(em);
  // A request charged nothing whose record another settler wrote meanwhile was settled there.
  return outcomes.map((outcome, i) =>
    isRecordedHere(outcome) && !written.has(events[i]!.requestId) ? "duplicate" : outcome,
  );
}

/**
 * The batch's leases and the requests among its events that already have a usage record, in one
 * statement (there is always one row: the recorded ids, joined to each lease if any). A record is
 * looked up by its whole key, (request_id, created_at), both of which the event fixes
 * (recordTime), so each lookup is one index probe in one partition, however many months the
 * table holds.
 */
async function readBatch(
  em: Em,
  leaseIds: readonly string[],
  events: readonly UsageCompleted[],
): Promise<{ leases: Map<string, LeaseRow>; recorded: Set<string> }> {
  const db = await billingDb(em);
  // The events' record keys as a table: k(request_id, created_at).
  const requestIds = events.map((e) => e.requestId);
  const times = events.map((e) => recordTime(e).toISOString());
  const keys = sql<RecordKey>`unnest(${requestIds}::uuid[], ${times}::timestamptz[])`.as<"k">(
    sql`k(request_id, created_at)`,
  );
  const recorded = db
    .selectFrom(keys)
    .innerJoin("usage_records as u", (join) =>
      join.onRef("u.request_id", "=", "k.request_id").onRef("u.created_at", "=", "k.created_at"),
    )
    .select(sql<string[]>`coalesce(array_agg(u.request_id::text), '{}')`.as("recorded"));
  const rows = await db
    .selectFrom(recorded.as("r"))
    .leftJoin(leasesWithIds(leaseIds).as("l"), (join) => join.onTrue())
    .select("r.recorded")
    .selectAll("l")
    .execute();
  const leases = rows.filter((row) => row.id !== null).map(toLeaseRow);
  return {
    leases: new Map(leases.map((lease) => [lease.id, lease])),
    recorded: new Set(rows[0]!.recorded),
  };
}

/** A usage record's key, as the driver reads it. */
interface RecordKey {
  request_id: string;
  created_at: string;
}

/** Whether settling the event wrote its usage record in this batch. */
const isRecordedHere = (outcome: SettleOutcome) => outcome !== "duplicate";
