import { max, max0, min } from "./bigint-math.ts";
import { affordableOutputTokens, costMicros, type Micros } from "./money.ts";
import { chargesOverage, chargesPerToken } from "./pricing-models.ts";

/**
 * How a request is priced (docs/adr/0017-one-cost-function.md): per-1M prices for its input and
 * output tokens, with input tokens the upstream served from its prompt cache at
 * `cachedInputPricePer1m` (absent: the input price; docs/adr/0039-cached-input-priced-clamped-verified.md),
 * and, for a `subscription_overage` plan, an overage price on the tokens beyond the included
 * tokens the request took from its subscription's budget when it was admitted (its cached ones at
 * `overage.cachedPricePer1m`, absent: the overage price).
 */
export interface RequestPricing {
  inputPricePer1m: Micros;
  outputPricePer1m: Micros;
  cachedInputPricePer1m?: Micros | undefined;
  overage?: { pricePer1m: Micros; cachedPricePer1m?: Micros | undefined; includedTokens: bigint };
}

/** A request's billed tokens; `cachedInputTokens` (untrusted, clamped here) are a part of the input. */
export interface RequestTokens {
  inputTokens: bigint;
  outputTokens: bigint;
  cachedInputTokens?: bigint;
}

/** A plan's terms as pricing reads them (a subscription's snapshot, or a budget's copy of it). */
export interface PlanPriceTerms {
  inputPricePer1m: Micros;
  outputPricePer1m: Micros;
  overagePricePer1m: Micros;
  /** payg: cached input tokens' price; subscription_overage: cached overage tokens'. */
  cachedInputPricePer1m?: Micros | undefined;
}

/**
 * A scoped key's request priced by its subscription's terms (never by the route): `payg` at the
 * plan's per-1M prices, `free` and `subscription` nothing, `subscription_overage` its overage
 * price on what `includedTokens` (taken at admission) does not cover.
 */
export function planPricing(pricingModel: string, terms: PlanPriceTerms, includedTokens: bigint): RequestPricing {
  if (chargesPerToken(pricingModel)) {
    return {
      inputPricePer1m: terms.inputPricePer1m,
      outputPricePer1m: terms.outputPricePer1m,
      cachedInputPricePer1m: terms.cachedInputPricePer1m,
    };
  }
  const free = { inputPricePer1m: 0n, outputPricePer1m: 0n };
  if (!chargesOverage(pricingModel)) return free;
  return {
    ...free,
    overage: { pricePer1m: terms.overagePricePer1m, cachedPricePer1m: terms.cachedInputPricePer1m, includedTokens },
  };
}

export interface RequestCharge {
  /** What the request costs: what settlement posts and what its answer's `usage.cost` says. */
  cost: Micros;
  /** The overage tokens it pays for (an overage plan's request; 0 otherwise). */
  overageTokens: bigint;
}

const MAX_TOKENS = BigInt(Number.MAX_SAFE_INTEGER);
const TOKENS_PER_PRICE_UNIT = 1_000_000n;

/** The most tokens `budget` pays for at `pricePer1m` (cost = ceil(tokens × price / 1M)). */
function tokensPaidBy(budget: Micros, pricePer1m: Micros): bigint {
  return pricePer1m === 0n ? MAX_TOKENS : (max0(budget) * TOKENS_PER_PRICE_UNIT) / pricePer1m;
}

/**
 * The one cost function (docs/adr/0017-one-cost-function.md): the edge puts it in the answer's
 * `usage.cost` and settlement posts it, from the same tokens, pricing and worst case:
 * `ceil(((input − cached) × input price + cached × cached price + output × output price) / 1M)`,
 * the cached tokens clamped here to `[0, input]` (neither side trusts an event for them); for an
 * overage plan, the overage price on every token beyond the included tokens the request took at
 * admission, its cached tokens being the last those cover (so the overage ones among them pay the
 * cached price). Never more than the worst case it was admitted with (the overage tokens it pays
 * for are those the worst case covers).
 */
export function requestCharge(tokens: RequestTokens, pricing: RequestPricing, worstCase: Micros): RequestCharge {
  const cap = max0(worstCase);
  const cached = min(max0(tokens.cachedInputTokens ?? 0n), max0(tokens.inputTokens));
  const base = tokenCost(
    max0(tokens.inputTokens) - cached,
    cached,
    max0(tokens.outputTokens),
    pricing.inputPricePer1m,
    pricing.cachedInputPricePer1m ?? pricing.inputPricePer1m,
    pricing.outputPricePer1m,
  );
  if (!pricing.overage) return { cost: min(base, cap), overageTokens: 0n };
  const { pricePer1m } = pricing.overage;
  const cachedPrice = pricing.overage.cachedPricePer1m ?? pricePer1m;
  const beyond = tokensBeyondIncluded(tokens, pricing.overage);
  // Cached tokens are the last the included tokens cover: the overage takes them first.
  const cachedBeyond = min(cached, beyond);
  const freshBeyond = beyond - cachedBeyond;
  const overage = tokenCost(freshBeyond, cachedBeyond, 0n, pricePer1m, cachedPrice, 0n);
  if (base + overage <= cap) return { cost: base + overage, overageTokens: beyond };
  // Past the worst case: the overage tokens it pays for are those the rest of it covers,
  // cheapest (cached) first.
  const room = max0(cap - base);
  const cachedPaid = min(cachedBeyond, tokensPaidBy(room, cachedPrice));
  const freshPaid = min(freshBeyond, tokensPaidBy(room - costMicros(cachedPaid, 0n, cachedPrice, 0n), pricePer1m));
  const paid = tokenCost(freshPaid, cachedPaid, 0n, pricePer1m, cachedPrice, 0n);
  return { cost: min(base + paid, cap), overageTokens: cachedPaid + freshPaid };
}

/** `ceil((fresh × inPrice + cached × cachedPrice + out × outPrice) / 1M)`, exact in integers. */
function tokenCost(
  fresh: bigint,
  cached: bigint,
  output: bigint,
  inputPricePer1m: Micros,
  cachedPricePer1m: Micros,
  outputPricePer1m: Micros,
): Micros {
  const scaled = fresh * inputPricePer1m + cached * cachedPricePer1m + output * outputPricePer1m;
  return (scaled + TOKENS_PER_PRICE_UNIT - 1n) / TOKENS_PER_PRICE_UNIT;
}

/** An overage plan's tokens (input and output alike) beyond the included tokens it took. */
function tokensBeyondIncluded(tokens: RequestTokens, overage: NonNullable<RequestPricing["overage"]>): bigint {
  return max0(max0(tokens.inputTokens) + max0(tokens.outputTokens) - max0(overage.includedTokens));
}

/**
 * The worst case a request is admitted with: what `requestCharge` would charge for at most these
 * tokens, uncapped, at the dearest of `pricings` (an account key's request may be answered by
 * any of its routes; a subscription's has one pricing), every input token at the fresh price
 * (what is cached is known only from the answer). For an overage plan the split between included
 * and overage tokens is the one its `includedTokens` says, decided at admission.
 */
export function worstCaseCharge(
  tokens: { inputTokens: bigint; outputTokens: bigint },
  pricings: readonly RequestPricing[],
): Micros {
  let dearest = 0n;
  for (const pricing of pricings) {
    const base = costMicros(tokens.inputTokens, tokens.outputTokens, pricing.inputPricePer1m, pricing.outputPricePer1m);
    const overage = pricing.overage
      ? costMicros(tokensBeyondIncluded(tokens, pricing.overage), 0n, pricing.overage.pricePer1m, 0n)
      : 0n;
    dearest = max(dearest, base + overage);
  }
  return dearest;
}

/** Whether any of `pricings` charges anything at all (else no credit limits a request). */
export function chargesAnything(pricings: readonly RequestPricing[]): boolean {
  return pricings.some(
    (p) => p.inputPricePer1m > 0n || p.outputPricePer1m > 0n || (p.overage !== undefined && p.overage.pricePer1m > 0n),
  );
}

/**
 * The most output tokens (all choices together) that `spare` credit pays for after a prompt of
 * `promptTokens`, by every one of `pricings` (so any of them may answer). An overage plan has no
 * per-token prices of its own (`planPricing`): its output is what its included tokens leave
 * after the prompt plus what the credit pays at its overage price.
 */
export function affordableOutput(spare: Micros, promptTokens: bigint, pricings: readonly RequestPricing[]): bigint {
  const overage = pricings.find((p) => p.overage !== undefined && p.overage.pricePer1m > 0n)?.overage;
  if (overage) {
    return max0((spare * TOKENS_PER_PRICE_UNIT) / overage.pricePer1m + max0(overage.includedTokens) - promptTokens);
  }
  return pricings.reduce(
    (least, p) => min(least, affordableOutputTokens(spare, promptTokens, p.inputPricePer1m, p.outputPricePer1m)),
    MAX_TOKENS,
  );
}
