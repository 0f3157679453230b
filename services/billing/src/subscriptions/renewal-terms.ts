import type { SubscriptionTerms } from "@mkt/proto/billing/v1/billing";

/** What the plan offers at a renewal: its current terms, and whether it still takes subscribers. */
export interface PlanOffer {
  terms: SubscriptionTerms;
  archived: boolean;
}

type NumericTerm = Exclude<keyof SubscriptionTerms, "pricingModel" | "cachedInputPricePer1mMicros">;

/**
 * Which way each numeric term favours the subscriber. A Record, so a term added to the proto
 * does not compile until someone decides which way it goes.
 */
const FAVOURS: Record<NumericTerm, "lower" | "higher"> = {
  monthlyPriceMicros: "lower",
  includedTokens: "higher",
  inputPricePer1mMicros: "lower",
  outputPricePer1mMicros: "lower",
  overagePricePer1mMicros: "lower",
  rpmLimit: "higher",
  tpmLimit: "higher",
  maxConcurrent: "higher",
  maxOutputTokens: "higher",
  maxContextTokens: "higher",
};

/**
 * The terms a pricing model is made of. They only compare within one model: a payg plan's 0
 * monthly price is not a cheaper subscription, it is another kind of plan.
 */
const PRICE_TERMS: ReadonlySet<NumericTerm> = new Set([
  "monthlyPriceMicros",
  "includedTokens",
  "inputPricePer1mMicros",
  "outputPricePer1mMicros",
  "overagePricePer1mMicros",
]);

/**
 * The terms a subscription renews on (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md), so a
 * hoster's edit can only improve them for an existing subscriber: each term is whichever of the
 * snapshot and the plan's current terms favours the subscriber (lower prices, more included tokens,
 * higher limits). When the pricing model changed, the snapshot keeps its model and its price terms
 * (only the limits compare across models). An archived plan (closed to new subscribers) or one
 * registry no longer knows (`undefined`) offers nothing: the subscriber renews on its own snapshot.
 */
export function renewalTerms(snapshot: SubscriptionTerms, offer: PlanOffer | undefined): SubscriptionTerms {
  if (!offer || offer.archived) return { ...snapshot };
  const current = offer.terms;
  const sameModel = current.pricingModel === snapshot.pricingModel;
  const merged: SubscriptionTerms = { ...snapshot };
  for (const [term, way] of Object.entries(FAVOURS) as Array<[NumericTerm, "lower" | "higher"]>) {
    if (!sameModel && PRICE_TERMS.has(term)) continue;
    const [a, b] = [snapshot[term], current[term]];
    merged[term] = way === "lower" ? (a < b ? a : b) : a > b ? a : b;
  }
  if (sameModel) merged.cachedInputPricePer1mMicros = lowerCachedPrice(snapshot, current);
  return merged;
}

/**
 * The lower of the two cached-input prices, each absent one read as what it means (the input
 * price, or the overage price on an overage plan); absent again only when both are. Each is at
 * most its own input (overage) price, so the lower is at most the lower of those: the merged
 * terms stay valid.
 */
function lowerCachedPrice(a: SubscriptionTerms, b: SubscriptionTerms): bigint | undefined {
  if (a.cachedInputPricePer1mMicros === undefined && b.cachedInputPricePer1mMicros === undefined) return undefined;
  const effective = (t: SubscriptionTerms) =>
    t.cachedInputPricePer1mMicros ??
    (t.pricingModel === "subscription_overage" ? t.overagePricePer1mMicros : t.inputPricePer1mMicros);
  const [x, y] = [effective(a), effective(b)];
  return x < y ? x : y;
}
