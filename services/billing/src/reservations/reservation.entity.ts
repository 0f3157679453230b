import { defineEntity, p } from "@mikro-orm/core";

/**
 * A credit hold for one chat request, with the price snapshot its settlement uses. A scoped key's
 * reservation also snapshots its subscription's pricing (null columns otherwise).
 */
export const Reservation = defineEntity({
  name: "Reservation",
  tableName: "reservations",
  properties: {
    id: p.uuid().primary(),
    requestId: p.text(),
    accountId: p.uuid(),
    keyId: p.text(),
    modelId: p.text(),
    provider: p.text(),
    hosterId: p.text(),
    inputPricePer1mMicros: p.bigint("bigint"),
    outputPricePer1mMicros: p.bigint("bigint"),
    inputTokens: p.bigint("bigint"),
    maxOutputTokens: p.bigint("bigint"),
    reservedMicros: p.bigint("bigint"),
    status: p.text(),
    slotReleasedAt: p.datetime().nullable(),
    subscriptionId: p.uuid().nullable(),
    pricingModel: p.text().nullable(),
    periodIndex: p.integer().nullable(),
    includedTokens: p.bigint("bigint").nullable(),
    overagePricePer1mMicros: p.bigint("bigint").nullable(),
    /** Tokens of the period's allowance this request's worst case may use. */
    includedClaim: p.bigint("bigint"),
    createdAt: p.datetime(),
    expiresAt: p.datetime(),
  },
});
