import type { Micros } from "@mkt/runtime/money";
import type { PricingModel } from "@mkt/runtime/pricing-models";

export type { PricingModel };

/**
 * How a subscription's requests are priced (docs/adr/0017-one-cost-function.md), from the terms
 * snapshot of the subscription, never from the route (registry prices hoster routes at 0). The edge
 * sizes a request's worst case from the budget's copy of these terms; registry (the answer's
 * `usage.cost`) and settlement charge with them through the one cost function, `requestCharge` in
 * @mkt/runtime/request-cost.
 */
export interface PlanPrices {
  pricingModel: PricingModel;
  inputPricePer1m: Micros;
  outputPricePer1m: Micros;
  overagePricePer1m: Micros;
  /** payg: cached input tokens' price; subscription_overage: cached overage tokens'. Absent: the input (overage) price. */
  cachedInputPricePer1m?: Micros | undefined;
  includedTokens: bigint;
}
