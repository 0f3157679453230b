import { PRICING_MODELS, type PricingModel } from "@mkt/runtime/pricing-models";
import { count, usd } from "./format.ts";

/** A plan as GET /v1/hosters and GET /hosters/products show it. */
export interface Plan {
  product_id: string;
  name: string;
  description?: string;
  pricing_model: PricingModel;
  monthly_price_usd: number;
  included_tokens: number;
  input_price_per_1m_usd: number;
  output_price_per_1m_usd: number;
  overage_price_per_1m_usd: number;
  /** payg: cached input tokens' price; subscription_overage: its cached overage tokens'. Null: none, they cost the input (overage) price. */
  cached_input_price_per_1m_usd?: number | null;
  rpm_limit: number;
  tpm_limit: number;
  max_concurrent: number;
  max_output_tokens: number;
  max_context_tokens: number;
  /** Callable with any account key, without subscribing (payg and free plans). */
  open?: boolean;
  status?: string;
}

const PRICING_MODEL_NAMES: Record<PricingModel, string> = {
  free: "Free",
  payg: "Pay as you go",
  subscription: "Monthly subscription",
  subscription_overage: "Monthly subscription with overage",
};

/** The plan form's choice of pricing models, each with its name in the form. */
export const PRICING_MODEL_CHOICES = PRICING_MODELS.map((model) => [model, PRICING_MODEL_NAMES[model]] as const);

/** " ($0.02 cached)" after the price a plan's cached-input price discounts; nothing when it has none. */
function cachedNote(plan: Plan): string {
  const cached = plan.cached_input_price_per_1m_usd;
  return cached === null || cached === undefined ? "" : ` (${usd(cached)} cached)`;
}

/** The plan's price in one line, as its pricing model charges it. */
export function priceLine(plan: Plan): string {
  const perToken = `${usd(plan.input_price_per_1m_usd)} in${cachedNote(plan)} / ${usd(plan.output_price_per_1m_usd)} out per 1M tokens`;
  switch (plan.pricing_model) {
    case "free":
      return "Free";
    case "payg":
      return `Pay as you go: ${perToken}`;
    case "subscription":
      return `${usd(plan.monthly_price_usd)} a month, ${count(plan.included_tokens)} tokens included`;
    case "subscription_overage":
      return `${usd(plan.monthly_price_usd)} a month, ${count(plan.included_tokens)} tokens included, then ${usd(plan.overage_price_per_1m_usd)} per 1M tokens${cachedNote(plan)}`;
  }
}

export function limitsLine(plan: Plan): string {
  return `${count(plan.rpm_limit)} requests/min · ${count(plan.tpm_limit)} tokens/min · ${plan.max_concurrent} at once · ${count(plan.max_output_tokens)} output tokens per answer`;
}
