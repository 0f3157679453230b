import type { Plan } from "./plan.ts";

/**
 * The subscription columns that copy a plan's terms (what lease budgets and renewals enforce), as an
 * SQL `set` list; `snapshotParams` gives its values in order. Activation writes the plan's terms,
 * every renewal the terms it renewed on (`renewalTerms`), so a hoster's edit never reaches a
 * subscription mid-period, and at a renewal only where it favours the subscriber.
 */
export const SNAPSHOT_SET = `hoster_id = ?, product_name = ?, hoster_name = ?, pricing_model = ?,
  monthly_price_micros = ?, included_tokens = ?, input_price_per_1m_micros = ?, output_price_per_1m_micros = ?,
  overage_price_per_1m_micros = ?, rpm_limit = ?, tpm_limit = ?, max_concurrent = ?, max_output_tokens = ?,
  max_context_tokens = ?, cached_input_price_per_1m_micros = ?`;

export function snapshotParams(plan: Plan): unknown[] {
  const t = plan.terms;
  return [
    plan.hosterId,
    t.name,
    plan.hosterName,
    t.pricingModel,
    t.monthlyPriceMicros,
    t.includedTokens,
    t.inputPricePer1mMicros,
    t.outputPricePer1mMicros,
    t.overagePricePer1mMicros,
    t.rpmLimit,
    t.tpmLimit,
    t.maxConcurrent,
    t.maxOutputTokens,
    t.maxContextTokens,
    t.cachedInputPricePer1mMicros ?? null,
  ];
}
