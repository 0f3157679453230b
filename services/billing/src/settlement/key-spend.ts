import { max0, min } from "@mkt/runtime/bigint-math";
import { isUuid } from "@mkt/runtime/ids";
import type { Micros } from "@mkt/runtime/money";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { AllowanceRow, LeaseRow } from "../leases/lease-store.ts";
import type { SettlementWrites } from "./settlement-writes.ts";

/** What a lease still holds of a key's room: granted − settled while open, admitted − settled once closed. */
const holds = (lease: LeaseRow, a: AllowanceRow) =>
  max0((lease.status === "closed" ? a.admitted : a.granted) - a.settled);

/**
 * A settled request's key accounting (docs/adr/0020-key-spend-limits-in-billing.md): its charge is
 * added to the key's spend, and on a spend-limited key its worst case is settled out of the key
 * room it took (as credit is out of the lease's hold), so the key's limit again has the unused part
 * free. The spend counts on the first day of the window whose room the request took, so a request
 * admitted just before a reset never counts in the next window; a key without a limit counts on the
 * day of the request, and its spend is folded into the key's days with the rollups (a report of it
 * may trail by the fold interval), while a limited key's is written in the settlement transaction,
 * which the next grant reads. Keys that are not UUIDs (none an edge sends) are skipped.
 */
export function settleKeySpend(
  writes: SettlementWrites,
  lease: LeaseRow,
  event: UsageCompleted,
  worstCase: Micros,
  charged: Micros,
  at: Date,
): void {
  if (!isUuid(event.keyId)) return;
  const rooms = lease.allowances
    .filter((a) => a.scope === event.keyId && a.resource === "key_credit" && holds(lease, a) > 0n)
    .sort((a, b) => b.windowStart!.getTime() - a.windowStart!.getTime());
  // The room of the window the request started in, else the latest one still holding anything.
  const room = rooms.find((a) => a.windowStart! <= at && at < a.windowEnd!) ?? rooms[0];
  if (room && lease.releasedAt === null) writes.settleRoom(room, min(worstCase, holds(lease, room)));
  // The lease's key limits are the account's as read under its wallet's lock, which setting a
  // limit takes too: a key limited from now on has its spend written by this batch, exactly.
  const limited = lease.keyLimits.some((k) => k.keyId === event.keyId);
  writes.spend(event.keyId, room?.windowStart ?? at, charged, limited);
}
