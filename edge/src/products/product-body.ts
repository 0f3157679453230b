import { usdToMicros } from "@mkt/runtime/money";
import { PRICING_MODELS } from "@mkt/runtime/pricing-models";
import { ProductPatch, ProductTerms } from "@mkt/proto/registry/v1/registry";

/** A plan's fields as JSON bodies carry them (POST and PATCH /hosters/products). */
export interface ProductBody {
  name?: string;
  description?: string;
  pricing_model?: string;
  monthly_price_usd?: number;
  included_tokens?: number;
  input_price_per_1m_usd?: number;
  output_price_per_1m_usd?: number;
  overage_price_per_1m_usd?: number;
  cached_input_price_per_1m_usd?: number;
  rpm_limit?: number;
  tpm_limit?: number;
  max_concurrent?: number;
  max_output_tokens?: number;
  max_context_tokens?: number;
  open?: boolean;
}

const usd = { type: "number" } as const;
const count = { type: "integer" } as const;

/**
 * The fields' JSON types only: registry owns the rules (required fields, bounds, which prices
 * apply to which pricing model) and names the field it refuses.
 */
const editable = {
  name: { type: "string", example: "Pro" },
  description: { type: "string" },
  monthly_price_usd: { ...usd, example: 9.99 },
  included_tokens: { ...count, example: 5_000_000 },
  input_price_per_1m_usd: { ...usd, example: 0.2 },
  output_price_per_1m_usd: { ...usd, example: 0.6 },
  overage_price_per_1m_usd: usd,
  cached_input_price_per_1m_usd: {
    ...usd,
    example: 0.02,
    description:
      "The price per 1M input tokens the upstream served from its prompt cache: payg (at most input_price_per_1m_usd) and subscription_overage (for its overage tokens, at most overage_price_per_1m_usd); refused on free and subscription plans. Left out, cached tokens cost the input (overage) price; 0 makes them free. Once set it stays set (null is refused): set it to the input (overage) price to charge cached tokens as fresh ones.",
  },
  rpm_limit: { ...count, example: 60 },
  tpm_limit: { ...count, example: 100_000 },
  max_concurrent: { ...count, example: 5 },
  max_output_tokens: { ...count, example: 4096 },
  max_context_tokens: { ...count, example: 8192 },
  open: {
    type: "boolean",
    description:
      "Callable with any customer's account key, without subscribing (payg and free plans only); default false.",
  },
} as const;

// Unknown fields (hoster_id, status, product_id...) are refused, never ignored.
export const createProductSchema = {
  type: "object",
  required: ["name", "pricing_model"],
  additionalProperties: false,
  properties: {
    ...editable,
    pricing_model: { type: "string", enum: PRICING_MODELS },
  },
} as const;

/** The pricing model is not editable: a plan of another kind is a new plan. */
export const patchProductSchema = { type: "object", additionalProperties: false, properties: editable } as const;

// Out-of-range numbers are clamped to a value still far beyond every bound registry applies, so
// registry refuses them with its own message and `param`; unclamped, a huge JSON number would not
// fit an int64 (or be written in exponent form, which usdToMicros does not parse).
const MAX_USD = 1e12;
const MAX_COUNT = 1e15;
const clamp = (v: number, max: number) => Math.min(Math.max(v, -max), max);
const micros = (v: number | undefined) => (v === undefined ? undefined : usdToMicros(clamp(v, MAX_USD)));
const int64 = (v: number | undefined) => (v === undefined ? undefined : BigInt(clamp(v, MAX_COUNT)));

function fields(body: ProductBody) {
  return {
    name: body.name,
    description: body.description,
    monthlyPriceMicros: micros(body.monthly_price_usd),
    includedTokens: int64(body.included_tokens),
    inputPricePer1mMicros: micros(body.input_price_per_1m_usd),
    outputPricePer1mMicros: micros(body.output_price_per_1m_usd),
    overagePricePer1mMicros: micros(body.overage_price_per_1m_usd),
    // Stays undefined when omitted: absent is the input (overage) price, unlike 0.
    cachedInputPricePer1mMicros: micros(body.cached_input_price_per_1m_usd),
    rpmLimit: int64(body.rpm_limit),
    tpmLimit: int64(body.tpm_limit),
    maxConcurrent: int64(body.max_concurrent),
    maxOutputTokens: int64(body.max_output_tokens),
    maxContextTokens: int64(body.max_context_tokens),
    open: body.open,
  };
}

/**
 * A new plan's terms; omitted fields are 0 (limits then get their defaults in registry), but for
 * the cached-input price, which stays absent.
 */
export function toTerms(body: ProductBody): ProductTerms {
  return ProductTerms.fromPartial({ ...fields(body), pricingModel: body.pricing_model });
}

/** The fields a PATCH body gives; the others stay as they are. */
export function toPatch(body: ProductBody): ProductPatch {
  return ProductPatch.fromPartial(fields(body));
}
