import { AppError } from "@mkt/runtime/errors";

export const PAUSED_MESSAGE = "Your access has been temporarily paused by the hoster.";

/**
 * The refusal for a scoped key whose subscription is not active
 * (docs/architecture.md#revocation-stops-at-once): paused 403, past due 402, cancelled 401; a
 * missing one is an invalid key. Lease grants and heartbeats answer it.
 */
export function refuseUnlessActive(status: string | undefined): void {
  switch (status) {
    case "active":
      return;
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
