import { defineEntity, p, type InferEntity } from "@mikro-orm/core";

/**
 * A customer's subscription to a hoster's plan. The plan columns are the terms of its current
 * period (null while `pending`): the plan's at activation, then what each renewal settled on
 * (renewal-terms.ts); `sealedApiKey` is the scoped key's secret, sealed with SECRETS_KEY, kept
 * for the 24 h replay window only.
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
    /** subscribed (POST /v1/subscriptions) | open (made by the account's first call to an open plan) */
    origin: p.text(),
    hosterId: p.uuid().nullable(),
    productName: p.text().nullable(),
    hosterName: p.text().nullable(),
    pricingModel: p.text().nullable(),
    monthlyPriceMicros: p.bigint("bigint").nullable(),
    includedTokens: p.bigint("bigint").nullable(),
    // Named explicitly: the naming strategy would make "Per1m" `per1m`, a column that does not exist,
    // and em.map of a raw row would then read these prices as null.
    inputPricePer1mMicros: p.bigint("bigint").nullable().fieldName("input_price_per_1m_micros"),
    outputPricePer1mMicros: p.bigint("bigint").nullable().fieldName("output_price_per_1m_micros"),
    overagePricePer1mMicros: p.bigint("bigint").nullable().fieldName("overage_price_per_1m_micros"),
    /** Null: cached input (an overage plan's cached overage) is priced as the input (overage) price. */
    cachedInputPricePer1mMicros: p.bigint("bigint").nullable().fieldName("cached_input_price_per_1m_micros"),
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
