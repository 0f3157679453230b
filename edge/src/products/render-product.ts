import { microsToUsd } from "@mkt/runtime/money";
import { ProductTerms, type Product } from "@mkt/proto/registry/v1/registry";
import { boolean, integer, nullableNumber, object, string, usd } from "../routes/response-schemas.ts";

/**
 * A hoster's plan as the API shows it (the hoster's own list and GET /v1/hosters alike): USD
 * numbers for prices, every field present; a price that does not apply to the plan is 0, but the
 * cached-input price is shown as stored: null when the plan has none (its cached tokens then cost
 * the input price, or the overage price), never a price the hoster did not set.
 */
export function renderProduct(product: Product) {
  const t = product.terms ?? ProductTerms.fromPartial({});
  return {
    product_id: product.productId,
    name: t.name,
    description: t.description,
    pricing_model: t.pricingModel,
    monthly_price_usd: microsToUsd(t.monthlyPriceMicros),
    included_tokens: Number(t.includedTokens),
    input_price_per_1m_usd: microsToUsd(t.inputPricePer1mMicros),
    output_price_per_1m_usd: microsToUsd(t.outputPricePer1mMicros),
    overage_price_per_1m_usd: microsToUsd(t.overagePricePer1mMicros),
    cached_input_price_per_1m_usd:
      t.cachedInputPricePer1mMicros === undefined ? null : microsToUsd(t.cachedInputPricePer1mMicros),
    rpm_limit: Number(t.rpmLimit),
    tpm_limit: Number(t.tpmLimit),
    max_concurrent: Number(t.maxConcurrent),
    max_output_tokens: Number(t.maxOutputTokens),
    max_context_tokens: Number(t.maxContextTokens),
    open: t.open,
    status: product.status,
    created_at: product.createdAt,
    updated_at: product.updatedAt,
  };
}

/** What renderProduct shows, as a response schema. */
export const productSchema = object({
  product_id: string(),
  name: string(),
  description: string(),
  pricing_model: string(),
  monthly_price_usd: usd(),
  included_tokens: integer(),
  input_price_per_1m_usd: usd(),
  output_price_per_1m_usd: usd(),
  overage_price_per_1m_usd: usd(),
  cached_input_price_per_1m_usd: nullableNumber(
    "USD per 1M input tokens served from the upstream's prompt cache (payg; subscription_overage: its overage tokens); null: the plan has none, so they cost the input (overage) price",
  ),
  rpm_limit: integer(),
  tpm_limit: integer(),
  max_concurrent: integer(),
  max_output_tokens: integer(),
  max_context_tokens: integer(),
  open: boolean("callable with any account key, without subscribing (payg and free plans only)"),
  status: string("`active` or `archived`"),
  created_at: string(),
  updated_at: string(),
});
