import { isUuid } from "@mkt/runtime/ids";
import type { BillingContext } from "../context.ts";

import { Reservation } from "./reservation.entity.ts";

/**
 * Marks the reservation's concurrency slot free: one idempotent UPDATE. An unknown or malformed
 * id is not an error, since registry calls this on every exit path, even after failures.
 */
export async function releaseSlot(ctx: BillingContext, reservationId: string): Promise<void> {
  if (!isUuid(reservationId)) return;
  await ctx.orm.em
    .fork()
    .nativeUpdate(Reservation, { id: reservationId, slotReleasedAt: null }, { slotReleasedAt: ctx.clock() });
}
