import type { Micros } from "@mkt/runtime/money";
import { planPricing, requestCharge, type RequestPricing } from "@mkt/runtime/request-cost";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { RelayRequest } from "./relay-request.ts";
import type { BilledUsage } from "./billed-usage.ts";

/**
 * The request's cost for the answer's `usage.cost`: what settlement will post for
 * these billed tokens, by the same function and inputs. A scoped key's request is priced by its
 * subscription's terms (the edge passes them with the included tokens it took at admission); an
 * account key's at the prices of the route that answered; either at most the admitted worst case.
 */
export function usageCost(request: RelayRequest, route: Route, billed: BilledUsage): Micros {
  const plan = request.subscriptionPricing;
  const pricing: RequestPricing = plan
    ? planPricing(
        plan.pricingModel,
        {
          inputPricePer1m: plan.inputPricePer1mMicros,
          outputPricePer1m: plan.outputPricePer1mMicros,
          overagePricePer1m: plan.overagePricePer1mMicros,
          cachedInputPricePer1m: plan.cachedInputPricePer1mMicros,
        },
        request.includedTokens,
      )
    : {
        inputPricePer1m: route.inputPricePer1mMicros,
        outputPricePer1m: route.outputPricePer1mMicros,
        cachedInputPricePer1m: route.cachedInputPricePer1mMicros,
      };
  return requestCharge(billed, pricing, request.worstCaseMicros).cost;
}
