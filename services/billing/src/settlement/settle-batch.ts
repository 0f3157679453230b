import { isUuid } from "@mkt/runtime/ids";
import type { Micros } from "@mkt/runtime/money";
import type { Logger } from "@mkt/runtime/logger";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Em } from "../context.ts";
import { loadLeases, lockWallets } from "../leases/lease-store.ts";
import { leaseAccounts, settleLeaseUsage, type SettlementBatch } from "./settle-lease-usage.ts";
import { SettlementWrites } from "./settlement-writes.ts";
import { recordWithoutCharge, type SettleOutcome } from "./usage-without-charge.ts";

const placeholders = (count: number) => Array.from({ length: count }, () => "?").join(", ");

/**
 * Settles a batch of usage.completed events inside the caller's transaction, in order, keyed on
 * request_id (DESIGN.md §2.6): each against the lease it was admitted on (settleLeaseUsage), the
 * same request twice in one batch (replayed under another message id) settling once.
 *
 * A batch costs a handful of statements whatever its size, so the wallet locks it takes are held
 * for milliseconds and the lease calls waiting on them (grants, heartbeats) are not held up behind
 * settlement: every wallet the batch charges is locked first, in one statement in account order
 * (settling event by event would take them in the batch's order, which two settlers could
 * cross); then its leases and the requests already recorded are read once; the events settle in
 * memory (a subscription's request also counts its period's use and gives tokens back, a few
 * statements of its own); and SettlementWrites writes the holds, balances, journal entries and
 * usage records at the end. An event without a lease id (no edge sends one: every request is
 * admitted on a lease) is recorded at no cost, like one naming an unknown lease. Write-offs are
 * pushed on `writtenOff`.
 */
export async function settleUsageBatch(
  em: Em,
  events: readonly UsageCompleted[],
  log: Logger,
  now: Date,
  writtenOff: Micros[] = [],
): Promise<SettleOutcome[]> {
  if (events.length === 0) return [];
  const leaseIds = [...new Set(events.map((e) => e.leaseId).filter(isUuid))];
  const accounts = await leaseAccounts(em, leaseIds);
  const wallets = await lockWallets(em, accounts.values());
  // Read after the wallets are locked: whatever a fence or the closer committed before is seen.
  const leases =
    leaseIds.length > 0 ? await loadLeases(em, `l.id in (${placeholders(leaseIds.length)})`, leaseIds) : [];
  const requestIds = [...new Set(events.map((e) => e.requestId))];
  const recorded = await em.execute(
    `select request_id from usage_records where request_id in (${placeholders(requestIds.length)})`,
    requestIds,
  );
  const batch: SettlementBatch = {
    leases: new Map(leases.map((lease) => [lease.id, lease])),
    wallets,
    recorded: new Set(recorded.map((r) => r.request_id as string)),
    writes: new SettlementWrites(),
    writtenOff,
  };
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
        ? await settleLeaseUsage(em, event, log, now, batch)
        : await recordWithoutCharge(em, event, log, now),
    );
  }
  await batch.writes.flush(em);
  return outcomes;
}
