import type { Subscription as SubscriptionMessage, SubscriptionTerms } from "@mkt/proto/billing/v1/billing";
import type { SubscriptionRow } from "./subscription.entity.ts";

const iso = (date: Date | null | undefined) => (date ? date.toISOString() : "");
const n = (value: bigint | null | undefined) => value ?? 0n;

/** A subscription as billing's API shows it: never its key. */
export function subscriptionMessage(row: SubscriptionRow): SubscriptionMessage {
  return {
    subscriptionId: row.id,
    accountId: row.accountId,
    productId: row.productId,
    productName: row.productName ?? "",
    hosterId: row.hosterId ?? "",
    hosterName: row.hosterName ?? "",
    status: row.status,
    periodStart: iso(row.periodStart),
    periodEnd: iso(row.periodEnd),
    createdAt: iso(row.createdAt),
    cancelledAt: iso(row.cancelledAt),
    terms: snapshotTerms(row),
    origin: row.origin,
  };
}

/** The plan terms snapshotted in a subscription row (empty pricing model before activation). */
export function snapshotTerms(row: SubscriptionRow): SubscriptionTerms {
  return {
    pricingModel: row.pricingModel ?? "",
    monthlyPriceMicros: n(row.monthlyPriceMicros),
    includedTokens: n(row.includedTokens),
    inputPricePer1mMicros: n(row.inputPricePer1mMicros),
    outputPricePer1mMicros: n(row.outputPricePer1mMicros),
    overagePricePer1mMicros: n(row.overagePricePer1mMicros),
    cachedInputPricePer1mMicros: row.cachedInputPricePer1mMicros ?? undefined,
    rpmLimit: n(row.rpmLimit),
    tpmLimit: n(row.tpmLimit),
    maxConcurrent: n(row.maxConcurrent),
    maxOutputTokens: n(row.maxOutputTokens),
    maxContextTokens: n(row.maxContextTokens),
  };
}

/** Statuses of a subscription that exists for its customer (not an attempt in progress or failed). */
export const LIVE_STATUSES = ["active", "paused", "past_due"] as const;
export const SHOWN_STATUSES = [...LIVE_STATUSES, "cancelled"] as const;
