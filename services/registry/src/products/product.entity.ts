import { defineEntity, p } from "@mikro-orm/core";
import type { PricingModel } from "@mkt/runtime/pricing-models";

/** `archived`: takes no new subscribers; existing subscriptions keep it. */
export type ProductStatus = "active" | "archived";

/**
 * A hoster's plan. Prices are integer micro-USD; a price that does not apply to the pricing
 * model is 0. Limits are stored with the defaults already applied.
 */
export const Product = defineEntity({
  name: "Product",
  tableName: "products",
  properties: {
    id: p.uuid().primary(),
    hosterId: p.uuid(),
    name: p.text(),
    description: p.text(),
    pricingModel: p.text().$type<PricingModel>(),
    monthlyPriceMicros: p.bigint("bigint"),
    includedTokens: p.bigint("bigint"),
    // Named explicitly: the naming strategy would write `per1m` where the columns say `per_1m`.
    inputPricePer1mMicros: p.bigint("bigint").fieldName("input_price_per_1m_micros"),
    outputPricePer1mMicros: p.bigint("bigint").fieldName("output_price_per_1m_micros"),
    overagePricePer1mMicros: p.bigint("bigint").fieldName("overage_price_per_1m_micros"),
    /** Null: cached input tokens cost the input price (an overage plan's, the overage price); 0 is a price. */
    cachedInputPricePer1mMicros: p.bigint("bigint").nullable().fieldName("cached_input_price_per_1m_micros"),
    rpmLimit: p.bigint("bigint"),
    tpmLimit: p.bigint("bigint"),
    maxConcurrent: p.bigint("bigint"),
    maxOutputTokens: p.bigint("bigint"),
    maxContextTokens: p.bigint("bigint"),
    /** Callable with any account key, without subscribing (payg and free plans only). */
    open: p.boolean().default(false),
    status: p.text().$type<ProductStatus>(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
    archivedAt: p.datetime().nullable(),
  },
});
