import { AppError } from "@mkt/runtime/errors";
import { microsToUsd } from "@mkt/runtime/money";
import { ProductTerms, type ProductPatch } from "@mkt/proto/registry/v1/registry";
import { chargesPerToken, isPricingModel, PRICING_MODELS, type PricingModel } from "@mkt/runtime/pricing-models";

export const MAX_PRODUCT_NAME_CHARS = 100;
export const MAX_PRODUCT_DESCRIPTION_CHARS = 1000;

type NumericField = Exclude<keyof ProductTerms, "name" | "description" | "pricingModel" | "open">;

/**
 * The pricing models a plan may be open with: an open plan is used without subscribing, so it
 * has no fee to charge and nothing to snapshot.
 */
const OPENABLE: readonly PricingModel[] = ["payg", "free"];

interface FieldRule {
  /** The JSON field the edge maps it from, named in `param`. */
  param: string;
  /** Largest value accepted: generous for any real plan, small enough to refuse typos and abuse. */
  max: bigint;
  usd: boolean;
}

/** Bounds of every numeric field (prices in micro-USD). */
export const FIELD_RULES: Record<NumericField, FieldRule> = {
  monthlyPriceMicros: { param: "monthly_price_usd", max: 10_000_000_000n, usd: true }, // 10,000 USD
  includedTokens: { param: "included_tokens", max: 10_000_000_000n, usd: false },
  inputPricePer1mMicros: { param: "input_price_per_1m_usd", max: 1_000_000_000n, usd: true }, // 1,000 USD
  outputPricePer1mMicros: { param: "output_price_per_1m_usd", max: 1_000_000_000n, usd: true },
  overagePricePer1mMicros: { param: "overage_price_per_1m_usd", max: 1_000_000_000n, usd: true },
  cachedInputPricePer1mMicros: { param: "cached_input_price_per_1m_usd", max: 1_000_000_000n, usd: true },
  rpmLimit: { param: "rpm_limit", max: 100_000n, usd: false },
  tpmLimit: { param: "tpm_limit", max: 100_000_000n, usd: false },
  maxConcurrent: { param: "max_concurrent", max: 1_000n, usd: false },
  maxOutputTokens: { param: "max_output_tokens", max: 1_000_000n, usd: false },
  maxContextTokens: { param: "max_context_tokens", max: 10_000_000n, usd: false },
};

/** Limits a plan leaves at 0 get these (the spec's "Limits" table). */
export const DEFAULT_LIMITS = {
  rpmLimit: 60n,
  tpmLimit: 100_000n,
  maxConcurrent: 5n,
  maxOutputTokens: 4096n,
  maxContextTokens: 8192n,
} as const satisfies Partial<Record<NumericField, bigint>>;

type LimitField = keyof typeof DEFAULT_LIMITS;
/** The cached-input price is optional (absent: the price it discounts), so it has its own rule. */
type TermField = Exclude<NumericField, LimitField | "cachedInputPricePer1mMicros">;

/**
 * The price terms each pricing model uses: the fields listed must be above 0, the
 * others must be 0 (absent). payg is the exception: it needs at least one of its two prices.
 */
const TERMS_OF: Record<PricingModel, readonly TermField[]> = {
  free: [],
  payg: ["inputPricePer1mMicros", "outputPricePer1mMicros"],
  subscription: ["monthlyPriceMicros", "includedTokens"],
  subscription_overage: ["monthlyPriceMicros", "includedTokens", "overagePricePer1mMicros"],
};

const TERM_FIELDS: readonly TermField[] = [
  "monthlyPriceMicros",
  "includedTokens",
  "inputPricePer1mMicros",
  "outputPricePer1mMicros",
  "overagePricePer1mMicros",
];

/**
 * The price a cached-input price discounts, per pricing model that may have one: payg's input
 * price, and an overage plan's overage price (its included tokens are free, cached or not).
 */
const CACHED_PRICE_OF: Partial<Record<PricingModel, TermField>> = {
  payg: "inputPricePer1mMicros",
  subscription_overage: "overagePricePer1mMicros",
};

const invalid = (param: string, message: string) => new AppError("invalid_request", message, { param });

/** Whether text holds a C0 control character or DEL (a name is one line of plain text). */
const hasControlChars = (text: string) => [...text].some((c) => c < " " || c === "\x7f");

function bound(rule: FieldRule): string {
  return rule.usd ? `${microsToUsd(rule.max)} USD` : rule.max.toString();
}

/**
 * Checks a plan's terms and returns them normalized: text trimmed, 0 limits replaced by their
 * defaults. Every refusal is `invalid_request` whose `param` names the JSON field. A price or
 * token allowance that does not apply to the pricing model must be 0 (absent): a value there is
 * refused rather than dropped, since it means the hoster had another kind of plan in mind.
 */
export function validateTerms(terms: ProductTerms): ProductTerms {
  const name = terms.name.trim();
  if (name.length < 1 || name.length > MAX_PRODUCT_NAME_CHARS || hasControlChars(name)) {
    throw invalid("name", `name must be 1 to ${MAX_PRODUCT_NAME_CHARS} characters, without control characters.`);
  }
  const description = terms.description.trim();
  if (description.length > MAX_PRODUCT_DESCRIPTION_CHARS) {
    throw invalid("description", `description must be at most ${MAX_PRODUCT_DESCRIPTION_CHARS} characters.`);
  }
  const pricingModel = terms.pricingModel.trim();
  if (!isPricingModel(pricingModel)) {
    throw invalid("pricing_model", `pricing_model must be one of ${PRICING_MODELS.join(", ")}.`);
  }

  for (const [field, rule] of Object.entries(FIELD_RULES) as Array<[NumericField, FieldRule]>) {
    const value = terms[field];
    if (value !== undefined && (value < 0n || value > rule.max)) {
      throw invalid(rule.param, `${rule.param} must be from 0 to ${bound(rule)}.`);
    }
  }

  const used = TERMS_OF[pricingModel];
  for (const field of TERM_FIELDS) {
    const { param } = FIELD_RULES[field];
    if (!used.includes(field) && terms[field] !== 0n) {
      throw invalid(param, `${param} does not apply to a ${pricingModel} plan; leave it out.`);
    }
  }
  if (chargesPerToken(pricingModel)) {
    if (terms.inputPricePer1mMicros === 0n && terms.outputPricePer1mMicros === 0n) {
      throw invalid(
        "input_price_per_1m_usd",
        "A payg plan needs input_price_per_1m_usd or output_price_per_1m_usd above 0 (a plan that charges nothing is free).",
      );
    }
  } else {
    for (const field of used) {
      const { param } = FIELD_RULES[field];
      if (terms[field] === 0n) throw invalid(param, `A ${pricingModel} plan needs ${param} above 0.`);
    }
  }

  checkCachedPrice(terms, pricingModel);

  if (terms.open && !OPENABLE.includes(pricingModel)) {
    throw invalid("open", `Only payg and free plans can be open; a ${pricingModel} plan is sold by subscription.`);
  }

  const limits: Record<LimitField, bigint> = { ...DEFAULT_LIMITS };
  for (const field of Object.keys(DEFAULT_LIMITS) as LimitField[]) {
    if (terms[field] !== 0n) limits[field] = terms[field];
  }
  return ProductTerms.fromPartial({ ...terms, name, description, pricingModel, ...limits });
}

/**
 * A cached-input price, when given, is a discount on the price it names in CACHED_PRICE_OF:
 * never above it, and refused on a plan that has no such price. An explicit 0 is kept (cached
 * tokens free); absent stays absent, so it follows that price when the price changes.
 */
function checkCachedPrice(terms: ProductTerms, pricingModel: PricingModel): void {
  const cached = terms.cachedInputPricePer1mMicros;
  if (cached === undefined) return;
  const { param } = FIELD_RULES.cachedInputPricePer1mMicros;
  const discounted = CACHED_PRICE_OF[pricingModel];
  if (!discounted) {
    throw invalid(param, `${param} does not apply to a ${pricingModel} plan: it prices no input tokens; leave it out.`);
  }
  const cap = terms[discounted];
  if (cached > cap) {
    const capParam = FIELD_RULES[discounted].param;
    throw invalid(
      param,
      `${param} (${microsToUsd(cached)} USD) must not be above ${capParam} (${microsToUsd(cap)} USD), the price it discounts.`,
    );
  }
}

/**
 * A plan's terms with `patch` applied (absent fields keep their value), validated as a whole: the
 * result must still be a valid plan. A limit patched to 0 goes back to its default. The pricing
 * model is not patchable: a plan of another kind is a new plan.
 */
export function patchTerms(current: ProductTerms, patch: ProductPatch): ProductTerms {
  const merged: ProductTerms = { ...current };
  for (const [key, value] of Object.entries(patch) as Array<[keyof ProductPatch, unknown]>) {
    if (value !== undefined) Object.assign(merged, { [key]: value });
  }
  return validateTerms(merged);
}

/** Whether two sets of terms are the same (an update that changes nothing writes nothing). */
export function sameTerms(a: ProductTerms, b: ProductTerms): boolean {
  // Both sides' keys: an optional field may be missing from one and set on the other.
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof ProductTerms>;
  return [...keys].every((key) => a[key] === b[key]);
}
