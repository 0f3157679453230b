import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type { Em } from "../context.ts";

export const PAUSED_MESSAGE = "Your access has been temporarily paused by the hoster.";

/**
 * Authorize's check of a scoped key's subscription (DESIGN.md §2): read in the request's own
 * transaction, so a cancellation is refused synchronously, whatever an edge's principal cache
 * still holds. Anything but a live subscription of this account is an invalid key. The row is
 * locked for the rest of the transaction (its plan limits are checked against it, and the lock
 * serializes the subscriber's concurrent Authorize calls) and returned, terms snapshot included.
 */
export async function checkSubscription(
  em: Em,
  accountId: string,
  subscriptionId: string,
): Promise<Record<string, unknown>> {
  const [row] = isUuid(subscriptionId)
    ? await em.execute(`select * from subscriptions where id = ? and account_id = ? for update`, [
        subscriptionId,
        accountId,
      ])
    : [];
  switch (row?.status) {
    case "active":
      return row!;
    case "paused":
      throw new AppError("subscription_paused", PAUSED_MESSAGE);
    case "past_due":
      throw new AppError(
        "subscription_past_due",
        "This subscription's renewal is unpaid; top up your credit and it renews on the next attempt.",
      );
    case "cancelled":
      throw new AppError("invalid_api_key", "Invalid API key: its subscription has been cancelled.");
    default:
      throw new AppError("invalid_api_key", "Invalid API key.");
  }
}
