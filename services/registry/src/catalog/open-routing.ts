import { min } from "@mkt/runtime/bigint-math";
import { OpenEndpoint, OpenModel, type EndpointStats, type Verification } from "@mkt/proto/registry/v1/registry";
import type { RoutableHoster } from "../hosters/hoster-store.ts";
import type { StoredProduct } from "../products/product-store.ts";

/**
 * Below this uptime over the last 30 minutes an endpoint is tried only after every other one
 * (docs/routing.md), once it has FIGURES_TO_JUDGE requests and probes in that window: a new
 * endpoint is not judged on a handful of requests.
 */
export const UPTIME_FLOOR = 0.8;
export const FIGURES_TO_JUDGE = 20n;

/** USD per 1M tokens from micro-USD per 1M. */
const usdPer1m = (micros: bigint) => Number(micros) / 1_000_000;

/** Input and output together, USD per 1M tokens: what the default weight and `sort: "price"` use. */
export const endpointPrice = (e: Pick<OpenEndpoint, "inputPricePer1mMicros" | "outputPricePer1mMicros">) =>
  usdPer1m(e.inputPricePer1mMicros + e.outputPricePer1mMicros);

export interface OpenRoutingSources {
  hosters: readonly RoutableHoster[];
  plans: ReadonlyMap<string, readonly StoredProduct[]>;
  /** Keyed `hosterId/modelId`. */
  stats: ReadonlyMap<string, EndpointStats>;
  verdicts: ReadonlyMap<string, Verification>;
}

/**
 * Why an endpoint is a fallback only, or undefined for a primary: degraded by verification, or
 * below the uptime floor over 30 minutes with enough requests and probes to judge.
 */
export function fallbackReason(stats: EndpointStats | undefined, verdict: Verification | undefined) {
  if (verdict?.status === "degraded") return "degraded";
  const window = stats?.last30m;
  if (!window) return undefined;
  const judged = window.successes + window.faults;
  if (judged >= FIGURES_TO_JUDGE && window.uptime !== undefined && window.uptime < UPTIME_FLOOR) return "low_uptime";
  return undefined;
}

/**
 * The open part of the routing table: each canonical id served by a healthy hoster's chat model
 * on an active open plan, with its endpoints ranked by the default rule. Primaries first: free ones
 * (weight 0, chosen uniformly by the edge), then the others weighted 1 / (input + output USD per
 * 1M)², dearest last; then fallbacks by price. The edge draws from the weights per request and
 * applies the request's preferences; the weights themselves are decided here.
 */
export function openModels(sources: OpenRoutingSources): OpenModel[] {
  const byId = new Map<string, { canonicalId: string; endpoints: OpenEndpoint[] }>();
  for (const hoster of sources.hosters) {
    if (hoster.status !== "healthy") continue;
    const open = (sources.plans.get(hoster.id) ?? []).filter((plan) => plan.terms.open);
    for (const model of hoster.models) {
      if (model.kind === "embedding") continue;
      const key = `${hoster.id}/${model.modelId}`;
      const stats = sources.stats.get(key);
      const fallback = fallbackReason(stats, sources.verdicts.get(key)) !== undefined;
      for (const plan of open) {
        const t = plan.terms;
        const price = endpointPrice(t);
        const context = min(model.contextWindow, t.maxContextTokens);
        const endpoint = OpenEndpoint.fromPartial({
          hosterId: hoster.id,
          modelId: model.modelId,
          productId: plan.id,
          inputPricePer1mMicros: t.inputPricePer1mMicros,
          outputPricePer1mMicros: t.outputPricePer1mMicros,
          // Settlement only: the weight stays on the fresh prices, which the worst case is held at.
          cachedInputPricePer1mMicros: t.cachedInputPricePer1mMicros,
          contextWindow: context,
          maxOutputTokens: min(context, t.maxOutputTokens),
          quantization: model.quantization,
          tier: fallback ? "fallback" : "primary",
          weight: fallback || price === 0 ? 0 : 1 / (price * price),
          latencyP50Ms: stats?.last30m?.latencyP50Ms,
          tokensPerSecondP50: stats?.last30m?.tokensPerSecondP50,
          maxN: model.maxN > 0n ? model.maxN : 1n,
        });
        const id = model.canonicalId.toLowerCase();
        const entry = byId.get(id) ?? { canonicalId: model.canonicalId, endpoints: [] };
        entry.endpoints.push(endpoint);
        byId.set(id, entry);
      }
    }
  }
  return [...byId.values()]
    .sort((a, b) => a.canonicalId.localeCompare(b.canonicalId))
    .map((entry) => OpenModel.fromPartial({ canonicalId: entry.canonicalId, endpoints: entry.endpoints.sort(rank) }));
}

/** Primaries before fallbacks; then cheaper first (free ones first), then by hoster and model. */
function rank(a: OpenEndpoint, b: OpenEndpoint): number {
  if (a.tier !== b.tier) return a.tier === "primary" ? -1 : 1;
  const byPrice = endpointPrice(a) - endpointPrice(b);
  if (byPrice !== 0) return byPrice;
  return a.hosterId.localeCompare(b.hosterId) || a.modelId.localeCompare(b.modelId);
}
