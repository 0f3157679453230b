import { AppError } from "@mkt/runtime/errors";
import { isUuid } from "@mkt/runtime/ids";

/**
 * Whose usage a report reads: a whole account's (its own keys and its subscriptions alike), or,
 * for a scoped key, only the requests of its subscription (least privilege: a subscription's key
 * sees nothing else the account did).
 */
export interface UsageOwner {
  accountId: string;
  /** '' for the whole account. */
  subscriptionId: string;
}

/** The owner named by a report request, validated. */
export function usageOwner(request: { accountId: string; subscriptionId?: string | undefined }): UsageOwner {
  const subscriptionId = request.subscriptionId ?? "";
  if (!isUuid(request.accountId)) {
    throw new AppError("invalid_request", "account_id must be a UUID", { param: "account_id" });
  }
  if (subscriptionId !== "" && !isUuid(subscriptionId)) {
    throw new AppError("invalid_request", "subscription_id must be a UUID", { param: "subscription_id" });
  }
  return { accountId: request.accountId, subscriptionId };
}

/**
 * The condition selecting the owner's rows of `usage_records` or `usage_hourly` (both lead their
 * indexes with account_id), and its parameters in order.
 */
export function ownerCondition(owner: UsageOwner): { sql: string; params: string[] } {
  return owner.subscriptionId === ""
    ? { sql: "account_id = ?", params: [owner.accountId] }
    : { sql: "account_id = ? and subscription_id = ?", params: [owner.accountId, owner.subscriptionId] };
}
