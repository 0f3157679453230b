import { AppError } from "@mkt/runtime/errors";
import { int8 } from "../context.ts";
import type { PlanPrices, PricingModel } from "./plan-pricing.ts";

/**
 * A subscription's terms snapshot as its lease budgets enforce it
 * (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md).
 */
export interface PlanTerms extends PlanPrices {
  subscriptionId: string;
  /** The plan subscribed to. */
  productId: string;
  hosterId: string;
  periodIndex: number;
  periodEnd: Date | undefined;
  rpmLimit: bigint;
  tpmLimit: bigint;
  maxConcurrent: bigint;
  maxOutputTokens: bigint;
  maxContextTokens: bigint;
}

/** Plan defaults (registry's DEFAULT_LIMITS); the snapshot always has them, these only guard a missing one. */
const DEFAULTS = { rpm: 60n, tpm: 100_000n, concurrent: 5n, output: 4096n, context: 8192n };
const optionalInt8 = (value: unknown) => (value === null || value === undefined ? undefined : int8(value));
const positiveOr = (value: unknown, fallback: bigint) => (int8(value) > 0n ? int8(value) : fallback);

/** Reads the terms out of a locked `subscriptions` row (raw SQL: bigints arrive as text). */
export function planTerms(row: Record<string, unknown>): PlanTerms {
  const periodEnd = row.period_end as string | Date | null;
  return {
    subscriptionId: row.id as string,
    productId: (row.product_id as string | null) ?? "",
    hosterId: (row.hoster_id as string | null) ?? "",
    pricingModel: row.pricing_model as PricingModel,
    inputPricePer1m: int8(row.input_price_per_1m_micros),
    outputPricePer1m: int8(row.output_price_per_1m_micros),
    overagePricePer1m: int8(row.overage_price_per_1m_micros),
    cachedInputPricePer1m: optionalInt8(row.cached_input_price_per_1m_micros),
    includedTokens: int8(row.included_tokens),
    periodIndex: Number(row.period_index),
    periodEnd: periodEnd === null ? undefined : new Date(periodEnd),
    rpmLimit: positiveOr(row.rpm_limit, DEFAULTS.rpm),
    tpmLimit: positiveOr(row.tpm_limit, DEFAULTS.tpm),
    maxConcurrent: positiveOr(row.max_concurrent, DEFAULTS.concurrent),
    maxOutputTokens: positiveOr(row.max_output_tokens, DEFAULTS.output),
    maxContextTokens: positiveOr(row.max_context_tokens, DEFAULTS.context),
  };
}

export function requestRateRefusal(limit: bigint, resetSeconds: number): AppError {
  return new AppError(
    "rate_limit_exceeded",
    `Rate limit reached for this subscription: ${limit} requests per minute. Try again in ${resetSeconds}s.`,
    {
      headers: {
        "retry-after": String(resetSeconds),
        "x-ratelimit-limit-requests": String(limit),
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": `${resetSeconds}s`,
      },
    },
  );
}

/** `needed` is what this request counts: its prompt plus max_tokens (or one output token). */
export function tokenRateRefusal(limit: bigint, remaining: bigint, needed: bigint, resetSeconds: number): AppError {
  const left = remaining > 0n ? remaining : 0n;
  const hint =
    needed > limit
      ? "This request alone is larger than the limit; shorten the prompt or lower max_tokens."
      : `Try again in ${resetSeconds}s.`;
  return new AppError(
    "rate_limit_exceeded",
    `Token rate limit reached for this subscription: ${limit} tokens per minute, ${left} left this minute, and this request counts ${needed} (prompt plus output cap). ${hint}`,
    {
      headers: {
        "retry-after": String(resetSeconds),
        "x-ratelimit-limit-tokens": String(limit),
        "x-ratelimit-remaining-tokens": String(left),
        "x-ratelimit-reset-tokens": `${resetSeconds}s`,
      },
    },
  );
}

export function concurrencyRefusal(limit: bigint): AppError {
  return new AppError(
    "concurrency_limit_exceeded",
    `This subscription allows ${limit} request${limit === 1n ? "" : "s"} at a time; wait for one to finish.`,
    { headers: { "retry-after": "1" } },
  );
}

export function includedTokensRefusal(plan: PlanTerms, now: Date): AppError {
  const end = plan.periodEnd;
  const seconds = end ? Math.max(1, Math.ceil((end.getTime() - now.getTime()) / 1000)) : 60;
  return new AppError(
    "included_tokens_exhausted",
    `This subscription's ${plan.includedTokens} included tokens for the current period are used up` +
      (end ? `; they renew at ${end.toISOString()}.` : "."),
    { headers: { "retry-after": String(seconds) } },
  );
}
