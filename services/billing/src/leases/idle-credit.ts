import type { Em } from "../context.ts";
import { creditOf, type LeaseRow, type WalletRow } from "./lease-rows.ts";
import { setGranted, shiftHold } from "./lease-writes.ts";

/**
 * An idle lease gives back the credit room lent beyond `keep` spare (its report's
 * keep_spare_credit_micros): its hold falls to what was admitted and not settled, plus `keep`.
 * Room lent for a burst would otherwise stay held for the whole LEASE_IDLE_MS an idle lease
 * stays open: a subscription's purchase or renewal, another edge's grant and a top-up's answer
 * all see posted − held. The edge took no more than `keep` since the report's send, so nothing
 * admitted meanwhile loses its cover. Call after the report is applied, wallet locked.
 */
export async function shrinkIdleCredit(em: Em, lease: LeaseRow, wallet: WalletRow, keep: bigint): Promise<void> {
  const credit = creditOf(lease);
  if (!credit || keep < 0n) return;
  // Settlement may have released a worst case the report did not count yet (admitted after its
  // send, from `keep`): the room never falls below what was settled.
  const floor = credit.admitted > lease.settledMicros ? credit.admitted : lease.settledMicros;
  const target = floor + keep;
  if (credit.granted <= target) return;
  const excess = credit.granted - target;
  const released = excess < lease.heldMicros ? excess : lease.heldMicros;
  await setGranted(em, credit, target);
  await shiftHold(em, lease, wallet, -released);
}
