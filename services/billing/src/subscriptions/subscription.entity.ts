import { defineEntity, p, type InferEntity } from "@mikro-orm/core";

/**
 * A customer's subscription to a hoster's plan. The plan columns are a snapshot of its terms
 * taken when the current period started (null while `pending`); `sealedApiKey` is the scoped
 * key's secret, sealed with SECRETS_KEY, kept for the 24 h replay window only.
 */
export const Subscription = defineEntity({
  name: "Subscription",
  tableName: "subscriptions",
  properties: {
    id: p.uuid().primary(),
    accountId: p.uuid(),
    idempotencyKey: p.text(),
    productId: p.uuid(),
    /** pending | active | paused | past_due | cancelled | failed */
    status: p.text(),
    hosterId: p.uuid().nullable(),
    productName: p.text().nullable(),
    hosterName: p.text().nullable(),
    pricingModel: p.text().nullable(),
    monthlyPriceMicros: p.bigint("bigint").nullable(),
    includedTokens: p.bigint("bigint").nullable(),
    inputPricePer1mMicros: p.bigint("bigint").nullable(),
    outputPricePer1mMicros: p.bigint("bigint").nullable(),
    overagePricePer1mMicros: p.bigint("bigint").nullable(),
    rpmLimit: p.bigint("bigint").nullable(),
    tpmLimit: p.bigint("bigint").nullable(),
    maxConcurrent: p.bigint("bigint").nullable(),
    maxOutputTokens: p.bigint("bigint").nullable(),
    maxContextTokens: p.bigint("bigint").nullable(),
    periodIndex: p.integer(),
    periodStart: p.datetime().nullable(),
    periodEnd: p.datetime().nullable(),
    sealedApiKey: p.text().nullable(),
    /** The scoped key's id (accounts): usage records carry it, so the hoster's reports find the subscription. */
    keyId: p.text().nullable(),
    /** Set while the plan's hoster has paused the subscriber; kept through past_due and renewals. */
    hosterPausedAt: p.datetime().nullable(),
    keyRequestedAt: p.datetime().nullable(),
    keyRevokedAt: p.datetime().nullable(),
    failureCode: p.text().nullable(),
    createdAt: p.datetime(),
    activatedAt: p.datetime().nullable(),
    cancelledAt: p.datetime().nullable(),
  },
});

export type SubscriptionRow = InferEntity<typeof Subscription>;
