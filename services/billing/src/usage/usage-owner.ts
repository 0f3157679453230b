import { AppError } from "@mkt/runtime/errors";
import { isUuid } from "@mkt/runtime/ids";
import type { Expression, ExpressionBuilder, SqlBool } from "kysely";
import type { BillingDb } from "../billing-db.ts";

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

/** The tables a report reads by owner: both lead their indexes with account_id. */
export type OwnedTable = "usage_records" | "usage_hourly";

/** A condition on the rows of `usage_records` or `usage_hourly`: values are bound, never spliced into SQL. */
export type OwnerWhere = (eb: ExpressionBuilder<BillingDb, OwnedTable>) => Expression<SqlBool>;

/**
 * The condition selecting the owner's rows of `usage_records` or `usage_hourly`: `account_id = $1`,
 * and for a subscription `and subscription_id = $2`, the columns the (account_id, …) indexes lead
 * with.
 */
export function ownerWhere(owner: UsageOwner): OwnerWhere {
  return (eb) =>
    owner.subscriptionId === ""
      ? eb("account_id", "=", owner.accountId)
      : eb.and([eb("account_id", "=", owner.accountId), eb("subscription_id", "=", owner.subscriptionId)]);
}
