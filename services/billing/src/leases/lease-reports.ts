import type { LeaseReport } from "@mkt/proto/billing/v1/leases";
import type { Em } from "../context.ts";
import { writeRow } from "../write-batch.ts";
import type { LeaseRow } from "./lease-rows.ts";
import { LEASE_WRITES } from "./lease-writes.ts";

/**
 * Applies the edge's cumulative totals unless billing has already applied this sequence or a
 * later one (a delayed or repeated report changes nothing). Admitted totals only grow and never
 * pass what was granted. Returns whether the report was applied (a closed lease's never is: only
 * its slots of calls that have ended go back, applyEndedCalls).
 */
export async function applyReport(
  em: Em,
  lease: LeaseRow,
  report: LeaseReport,
  sequence: bigint,
  now: Date,
): Promise<boolean> {
  if (sequence <= lease.appliedSequence) return false;
  if (lease.status === "closed") {
    await applyEndedCalls(em, lease, report, sequence);
    return false;
  }
  let used = false;
  for (const { allowanceId, admitted } of report.admitted) {
    const allowance = lease.allowances.find((a) => a.id === allowanceId);
    if (!allowance) continue;
    // More than granted is an edge bug; billing already holds everything granted, so capping
    // loses nothing.
    const next = admitted > allowance.granted ? allowance.granted : admitted;
    // Slots are not cumulative: the edge reports its requests in flight now, which also fall.
    if (allowance.resource === "slots" ? next === allowance.admitted : next <= allowance.admitted) continue;
    allowance.admitted = next;
    used = true;
    await writeRow(em, LEASE_WRITES.allowance, [allowance.id, next, 0n]);
  }
  lease.appliedSequence = sequence;
  await writeRow(em, LEASE_WRITES.lease, [lease.id, sequence, used ? now : null, 0n, null, null, null]);
  return true;
}

/**
 * A report of a lease already closed: the calls it had in flight at its final report keep their
 * slots (closeReported) until they end, which only the edge knows, so it reports the lease until
 * they have (held-leases.ts). Its slots fall to the calls still running; nothing else of a closed
 * lease changes. Without this a subscriber's slot stayed taken until the lease's release, up to
 * MAX_REQUEST_MS after the call had ended, and its next requests were refused 429.
 */
async function applyEndedCalls(em: Em, lease: LeaseRow, report: LeaseReport, sequence: bigint): Promise<void> {
  if (lease.releasedAt) return;
  let ended = false;
  for (const { allowanceId, admitted } of report.admitted) {
    const slots = lease.allowances.find((a) => a.id === allowanceId && a.resource === "slots");
    if (!slots || admitted >= slots.admitted) continue;
    slots.admitted = admitted;
    ended = true;
    await writeRow(em, LEASE_WRITES.allowance, [slots.id, admitted, 0n]);
  }
  // The sequence too: a report sent before this one, arriving late, never raises them again.
  if (ended) {
    lease.appliedSequence = sequence;
    await writeRow(em, LEASE_WRITES.lease, [lease.id, sequence, null, 0n, null, null, null]);
  }
}
