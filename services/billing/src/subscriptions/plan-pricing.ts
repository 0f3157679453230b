import { affordableOutputTokens, costMicros, type Micros } from "@mkt/runtime/money";

/**
 * How a subscription's requests are priced (DESIGN.md §3, Pricing), from the terms snapshot of
 * the subscription, never from the route (registry prices hoster routes at 0). Pure functions:
 * Authorize sizes the hold with them, settlement charges with them.
 */
export type PricingModel = "free" | "payg" | "subscription" | "subscription_overage";

export interface PlanPrices {
  pricingModel: PricingModel;
  inputPricePer1m: Micros;
  outputPricePer1m: Micros;
  overagePricePer1m: Micros;
  includedTokens: bigint;
}

/** A period's allowance as Authorize sees it. */
export interface Allowance {
  /** Tokens of settled requests this period. */
  usedTokens: bigint;
  /** Overage tokens already charged this period. */
  overageTokens: bigint;
  /** Included tokens claimed by requests still in flight (their worst case, up to what was left). */
  claimedTokens: bigint;
}

const MAX_TOKENS = BigInt(Number.MAX_SAFE_INTEGER);
const TOKENS_PER_PRICE_UNIT = 1_000_000n;
const max0 = (n: bigint) => (n < 0n ? 0n : n);
const min = (a: bigint, b: bigint) => (a < b ? a : b);

/** Included tokens nobody has used or claimed yet. */
export function unclaimedTokens(prices: PlanPrices, allowance: Allowance): bigint {
  return max0(prices.includedTokens - allowance.usedTokens - allowance.claimedTokens);
}

/**
 * Overage tokens used but not yet charged: requests that finished out of order can leave some
 * (see overageCharge); the next overage request's hold covers them.
 */
export function overageDebt(prices: PlanPrices, allowance: Allowance): bigint {
  return max0(max0(allowance.usedTokens - prices.includedTokens) - allowance.overageTokens);
}

/** The most tokens `budget` pays for at `pricePer1m` (cost = ceil(tokens × price / 1M)). */
function tokensPaidBy(budget: Micros, pricePer1m: Micros): bigint {
  return pricePer1m === 0n ? MAX_TOKENS : (max0(budget) * TOKENS_PER_PRICE_UNIT) / pricePer1m;
}

/** Most output tokens the spendable balance pays for after the prompt (0 when it pays for none). */
export function affordableOutput(
  prices: PlanPrices,
  allowance: Allowance,
  available: Micros,
  inputTokens: bigint,
): bigint {
  switch (prices.pricingModel) {
    case "payg":
      return affordableOutputTokens(max0(available), inputTokens, prices.inputPricePer1m, prices.outputPricePer1m);
    case "subscription_overage": {
      const paid = tokensPaidBy(available, prices.overagePricePer1m);
      if (paid === MAX_TOKENS) return MAX_TOKENS;
      const free = unclaimedTokens(prices, allowance);
      return max0(free + paid - overageDebt(prices, allowance) - inputTokens);
    }
    default:
      return MAX_TOKENS; // free, and subscription within its allowance, cost nothing per request
  }
}

export interface Hold {
  /** Micro-USD to hold: the worst case this request (and any overage debt) can be charged. */
  reserved: Micros;
  /** Included tokens this request's worst case may use; the rest of its worst case is overage. */
  claim: bigint;
}

/** The hold of a request whose worst case is `inputTokens + maxOutput` tokens. */
export function holdFor(prices: PlanPrices, allowance: Allowance, inputTokens: bigint, maxOutput: bigint): Hold {
  switch (prices.pricingModel) {
    case "payg":
      return {
        reserved: costMicros(inputTokens, maxOutput, prices.inputPricePer1m, prices.outputPricePer1m),
        claim: 0n,
      };
    case "subscription_overage": {
      const worst = inputTokens + maxOutput;
      const claim = min(worst, unclaimedTokens(prices, allowance));
      const overage = worst - claim + overageDebt(prices, allowance);
      return { reserved: costMicros(overage, 0n, prices.overagePricePer1m, 0n), claim };
    }
    default:
      return { reserved: 0n, claim: 0n };
  }
}

export interface OverageCharge {
  /** Overage tokens this settlement charges for. */
  overageTokens: bigint;
  cost: Micros;
}

/**
 * The overage charge of one settled request of a `subscription_overage` period, given the
 * period's use before it. The allowance is consumed in the order requests are settled: the
 * request pays for the tokens by which the period's use now exceeds the included tokens and
 * that no earlier request paid for, so a request crossing the line pays only for the part beyond
 * it, and the period's overage charges never exceed `max(0, used - included)`. The charge never
 * exceeds the request's hold; what the hold could not pay (requests finishing out of order) stays
 * as debt for the next overage request.
 */
export function overageCharge(args: {
  includedTokens: bigint;
  usedBefore: bigint;
  overageBefore: bigint;
  tokens: bigint;
  overagePricePer1m: Micros;
  reserved: Micros;
}): OverageCharge {
  const debt = max0(max0(args.usedBefore + args.tokens - args.includedTokens) - args.overageBefore);
  const overageTokens = min(debt, tokensPaidBy(args.reserved, args.overagePricePer1m));
  return { overageTokens, cost: costMicros(overageTokens, 0n, args.overagePricePer1m, 0n) };
}
