import type { OpenEndpoint } from "@mkt/proto/registry/v1/registry";
import type { EndpointSort, ProviderPreferences } from "./provider-preferences.ts";
import { rendezvousOrder } from "./rendezvous.ts";

/** A number in [0, 1): Math.random in production; tests inject a sequence to make shares exact. */
export type RandomSource = () => number;

/** An endpoint as the edge sees it when a request arrives. */
export interface EndpointChoice {
  endpoint: OpenEndpoint;
  /** Its hoster's name, lower-cased (preferences may name a hoster by it). */
  hosterName: string;
  /** It failed a call on this edge within the last 30 s. */
  recentFault: boolean;
}

const pricePer1m = (e: OpenEndpoint) => Number(e.inputPricePer1mMicros + e.outputPricePer1mMicros) / 1_000_000;
const names = (c: EndpointChoice, name: string) => c.hosterName === name || c.endpoint.hosterId.toLowerCase() === name;

/** What each `sort` orders by, smallest first; an endpoint with no figure goes last. */
const SORT_KEYS: Record<EndpointSort, (e: OpenEndpoint) => number> = {
  price: pricePer1m,
  latency: (e) => (e.latencyP50Ms === undefined ? Infinity : Number(e.latencyP50Ms)),
  throughput: (e) => (e.tokensPerSecondP50 === undefined ? Infinity : -Number(e.tokensPerSecondP50)),
};

/** The endpoints a request's filters allow: `only`, `ignore`, `quantizations` and `max_price`. */
function allowed(choices: readonly EndpointChoice[], prefs: ProviderPreferences): EndpointChoice[] {
  const maxPrompt = prefs.maxPrice?.prompt;
  const maxCompletion = prefs.maxPrice?.completion;
  return choices.filter(
    (c) =>
      (!prefs.only || prefs.only.some((name) => names(c, name))) &&
      !prefs.ignore?.some((name) => names(c, name)) &&
      (!prefs.quantizations || prefs.quantizations.includes(c.endpoint.quantization.toLowerCase())) &&
      (maxPrompt === undefined || Number(c.endpoint.inputPricePer1mMicros) / 1_000_000 <= maxPrompt) &&
      (maxCompletion === undefined || Number(c.endpoint.outputPricePer1mMicros) / 1_000_000 <= maxCompletion),
  );
}

/** Weighted draws without replacement: each pick's chance is its weight over what is left. */
function weightedOrder(choices: EndpointChoice[], random: RandomSource): EndpointChoice[] {
  const left = [...choices];
  const ordered: EndpointChoice[] = [];
  while (left.length > 1) {
    const total = left.reduce((sum, c) => sum + c.endpoint.weight, 0);
    let point = random() * total;
    let i = 0;
    while (i < left.length - 1 && point >= left[i]!.endpoint.weight) point -= left[i++]!.endpoint.weight;
    ordered.push(...left.splice(i, 1));
  }
  return [...ordered, ...left];
}

/** A uniform shuffle (Fisher–Yates) with the same random source. */
function shuffled(choices: EndpointChoice[], random: RandomSource): EndpointChoice[] {
  const out = [...choices];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/**
 * How the default rule orders the endpoints of one tier: the free ones each equally likely first,
 * the priced ones each first with probability weight / Σweight.
 */
export interface TierDraw {
  uniform(choices: EndpointChoice[]): EndpointChoice[];
  weighted(choices: EndpointChoice[]): EndpointChoice[];
}

/** A fresh random draw per request. */
export const randomDraw = (random: RandomSource): TierDraw => ({
  uniform: (choices) => shuffled(choices, random),
  weighted: (choices) => weightedOrder(choices, random),
});

/** Names an endpoint for rendezvous hashing: the same on every edge, one per (hoster, model, plan). */
const endpointId = (c: EndpointChoice) => `${c.endpoint.hosterId}/${c.endpoint.modelId}/${c.endpoint.productId}`;

/**
 * A conversation's own order (sticky-key.ts): weighted rendezvous hashing of its key, the same on
 * every edge and for every turn, with the random draw's odds over distinct conversations.
 */
export const stickyDraw = (key: string): TierDraw => ({
  uniform: (choices) => rendezvousOrder(choices, key, endpointId, () => 1),
  weighted: (choices) => rendezvousOrder(choices, key, endpointId, (c) => c.endpoint.weight),
});

/**
 * One group's order: by `sort` when asked; otherwise the default rule: free endpoints first,
 * uniformly, then by registry's weights (1 / price²). Fallbacks keep the table's order (by price).
 */
function groupOrder(group: EndpointChoice[], sort: EndpointSort | undefined, draw: TierDraw): EndpointChoice[] {
  if (sort) {
    const key = SORT_KEYS[sort];
    return [...group].sort((a, b) => key(a.endpoint) - key(b.endpoint));
  }
  const free = group.filter((c) => c.endpoint.tier === "primary" && pricePer1m(c.endpoint) === 0);
  const weighted = group.filter((c) => c.endpoint.tier === "primary" && pricePer1m(c.endpoint) > 0);
  const fallbacks = group.filter((c) => c.endpoint.tier !== "primary");
  return [...draw.uniform(free), ...draw.weighted(weighted), ...fallbacks];
}

/**
 * The default order of endpoints (docs/routing.md): primaries without a recent fault on this edge,
 * then primaries with one, then fallbacks (degraded or below the uptime floor), each group by the
 * rule or `sort`.
 */
function defaultOrder(choices: EndpointChoice[], sort: EndpointSort | undefined, draw: TierDraw) {
  const primary = choices.filter((c) => c.endpoint.tier === "primary");
  return [
    ...groupOrder(
      primary.filter((c) => !c.recentFault),
      sort,
      draw,
    ),
    ...groupOrder(
      primary.filter((c) => c.recentFault),
      sort,
      draw,
    ),
    ...groupOrder(
      choices.filter((c) => c.endpoint.tier !== "primary"),
      sort,
      draw,
    ),
  ];
}

/**
 * The endpoints of an open model to try for one request, in order: the request's filters first;
 * then the hosters `order` names, in its order; then (unless `allow_fallbacks` is false) the rest
 * by the default rule, each tier ordered by `draw` (random, or a conversation's own order). Without
 * `order`, `allow_fallbacks: false` keeps the first endpoint only. Empty when the filters leave none.
 */
export function orderEndpoints(
  choices: readonly EndpointChoice[],
  prefs: ProviderPreferences,
  draw: TierDraw,
): OpenEndpoint[] {
  const left = allowed(choices, prefs);
  const ordered: EndpointChoice[] = [];
  for (const name of prefs.order ?? []) {
    const named = left.filter((c) => names(c, name) && !ordered.includes(c));
    ordered.push(...defaultOrder(named, prefs.sort, draw));
  }
  if (prefs.order && !prefs.allowFallbacks) return ordered.map((c) => c.endpoint);
  const rest = defaultOrder(
    left.filter((c) => !ordered.includes(c)),
    prefs.sort,
    draw,
  );
  const all = [...ordered, ...rest];
  return (prefs.allowFallbacks ? all : all.slice(0, 1)).map((c) => c.endpoint);
}
