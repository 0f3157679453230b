import { costMicros, type Micros } from "./money.ts";

/**
 * How a request is priced (docs/adr/0017-one-cost-function.md): per-1M prices for its input and output tokens
 * and, for a `subscription_overage` plan, an overage price on the tokens beyond the included
 * tokens the request took from its subscription's budget when it was admitted.
 */
export interface RequestPricing {
  inputPricePer1m: Micros;
  outputPricePer1m: Micros;
  overage?: { pricePer1m: Micros; includedTokens: bigint };
}

/** A hoster plan's pricing model. */
export type PricingModel = "free" | "payg" | "subscription" | "subscription_overage";

/**
 * A scoped key's request priced by its subscription's terms (never by the route): `payg` at the
 * plan's per-1M prices, `free` and `subscription` nothing, `subscription_overage` its overage
 * price on what `includedTokens` (taken at admission) does not cover.
 */
export function planPricing(
  pricingModel: string,
  terms: { inputPricePer1m: Micros; outputPricePer1m: Micros; overagePricePer1m: Micros },
  includedTokens: bigint,
): RequestPricing {
  if (pricingModel === "payg") {
    return { inputPricePer1m: terms.inputPricePer1m, outputPricePer1m: terms.outputPricePer1m };
  }
  const free = { inputPricePer1m: 0n, outputPricePer1m: 0n };
  if (pricingModel !== "subscription_overage") return free;
  return { ...free, overage: { pricePer1m: terms.overagePricePer1m, includedTokens } };
}

export interface RequestCharge {
  /** What the request costs: what settlement posts and what its answer's `usage.cost` says. */
  cost: Micros;
  /** The overage tokens it pays for (an overage plan's request; 0 otherwise). */
  overageTokens: bigint;
}

const MAX_TOKENS = BigInt(Number.MAX_SAFE_INTEGER);
const TOKENS_PER_PRICE_UNIT = 1_000_000n;
const max0 = (n: bigint) => (n < 0n ? 0n : n);
const min = (a: bigint, b: bigint) => (a < b ? a : b);

/** The most tokens `budget` pays for at `pricePer1m` (cost = ceil(tokens × price / 1M)). */
function tokensPaidBy(budget: Micros, pricePer1m: Micros): bigint {
  return pricePer1m === 0n ? MAX_TOKENS : (max0(budget) * TOKENS_PER_PRICE_UNIT) / pricePer1m;
}

/**
 * The one cost function (docs/adr/0017-one-cost-function.md): the edge puts it in the answer's `usage.cost` and
 * settlement posts it, from the same tokens, pricing and worst case. `costMicros` of the tokens at
 * the per-1M prices, plus for an overage plan the overage price on every token (input and output
 * alike) beyond the included tokens the request took at admission; never more than the worst case
 * it was admitted with (the overage tokens it pays for are those the worst case covers).
 */
export function requestCharge(
  tokens: { inputTokens: bigint; outputTokens: bigint },
  pricing: RequestPricing,
  worstCase: Micros,
): RequestCharge {
  const cap = max0(worstCase);
  const base = costMicros(tokens.inputTokens, tokens.outputTokens, pricing.inputPricePer1m, pricing.outputPricePer1m);
  if (!pricing.overage) return { cost: min(base, cap), overageTokens: 0n };
  const { pricePer1m, includedTokens } = pricing.overage;
  const beyond = max0(tokens.inputTokens + tokens.outputTokens - max0(includedTokens));
  const overageTokens = min(beyond, tokensPaidBy(cap - base, pricePer1m));
  return { cost: min(base + costMicros(overageTokens, 0n, pricePer1m, 0n), cap), overageTokens };
}
