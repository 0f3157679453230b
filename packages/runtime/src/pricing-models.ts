/**
 * The pricing models a hoster's plan can have, and what each one charges. Every process (and
 * the portal, which is why this module imports nothing) asks these predicates rather than
 * comparing the model's name.
 */
export const PRICING_MODELS = ["free", "payg", "subscription", "subscription_overage"] as const;

/** A hoster plan's pricing model. */
export type PricingModel = (typeof PRICING_MODELS)[number];

/** Whether `value` names a pricing model. */
export function isPricingModel(value: string): value is PricingModel {
  return (PRICING_MODELS as readonly string[]).includes(value);
}

/** A `payg` plan: its requests pay the plan's per-1M input and output prices. */
export function chargesPerToken(model: string): boolean {
  return model === "payg";
}

/** The subscription kinds: a monthly price when a period starts, for included tokens. */
export function chargesMonthly(model: string): boolean {
  return model === "subscription" || model === "subscription_overage";
}

/** Plans whose period holds a number of included tokens (the subscription kinds). */
export function hasIncludedTokens(model: string): boolean {
  return chargesMonthly(model);
}

/** A `subscription_overage` plan: tokens beyond the included ones pay its overage price. */
export function chargesOverage(model: string): boolean {
  return model === "subscription_overage";
}

/**
 * A `subscription` plan: it serves nothing once its included tokens are gone (the request that
 * crosses the line is served in full).
 */
export function stopsAtIncludedTokens(model: string): boolean {
  return model === "subscription";
}
