import type { FastifyReply } from "fastify";
import { max, min } from "@mkt/runtime/bigint-math";
import { outputCeiling, servedOutputTokens } from "@mkt/runtime/context-limits";
import { AppError } from "@mkt/runtime/errors";
import { chargesOverage, hasIncludedTokens } from "@mkt/runtime/pricing-models";
import {
  affordableOutput,
  chargesAnything,
  planPricing,
  worstCaseCharge,
  type RequestPricing,
} from "@mkt/runtime/request-cost";
import { LeaseResource, type BudgetTerms } from "@mkt/proto/billing/v1/leases";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { HeldLease, Room } from "../leases/held-lease.ts";
import type { LeaseTable, WorstCase } from "../leases/lease-table.ts";
import type { Ticket } from "../leases/lease-admission.ts";
import type { SubscriptionPricing } from "../relay/relay-request.ts";

/** What admission needs of a chat request, beyond its principal. */
export interface ChatNeed {
  accountId: string;
  tier: string;
  /** A scoped key's subscription ('' for an account key): its budget in the lease admits it. */
  subscriptionId: string;
  /** The API key: a spend-limited key's room in the lease admits it too. */
  keyId: string;
  /**
   * The models to try, in order (the client's `model`, then its `models` fallbacks; at least
   * one): the worst case held is the largest among them, as any of them may answer.
   */
  routes: readonly Route[];
  /**
   * max_tokens / max_completion_tokens (Responses: max_output_tokens); 0 when the client gave
   * neither. Never refused: admission lowers it to the output ceiling.
   */
  requested: bigint;
  /** The client's `n` (at least 1): every worst case covers the cap × n. */
  choices: bigint;
}

/**
 * Step one of admission (docs/architecture.md#admission-on-a-lease): one request of the account's rate windows (and on a
 * scoped key one of its plan's minute and one of its slots), taken before the prompt is counted.
 * A cold account asks billing once for the request and what its worst case is known to be at
 * least (the output cap × n at the dearest route's price, or the cheapest open endpoint's), so the
 * usual cold request makes one round trip, not two.
 */
export function admitRequest(leases: LeaseTable, need: ChatNeed): Promise<Ticket> {
  // A field above a model's cap will be lowered to a ceiling the prompt decides: until then it is
  // known only to be at least one token, as when no field is given (the grant must cover no more).
  const asked = need.routes.every((route) => need.requested <= route.maxOutputTokensCap) ? need.requested : 0n;
  const output = (asked > 0n ? asked : 1n) * need.choices;
  const prices = routePricings(need.routes);
  // At least the dearest route's worst case; for an open model's endpoints the cheapest one's, as
  // the balance may afford only that one (step two then leaves the dearer ones out).
  const charges = prices.map((p) => worstCaseCharge({ inputTokens: 0n, outputTokens: output }, [p]));
  const pick = need.routes.every((r) => r.open) ? min : max;
  const credit = charges.reduce((chosen, charge) => pick(chosen, charge));
  // Without max_tokens the worst case is likely the model's output cap (or less when the prompt
  // or the balance leaves less): a cold grant lends that ahead, so step two needs no second one.
  const likely =
    asked > 0n || need.subscriptionId
      ? 0n
      : need.routes.reduce(
          (most, route, i) =>
            max(
              most,
              worstCaseCharge({ inputTokens: 0n, outputTokens: route.maxOutputTokensCap * need.choices }, [prices[i]!]),
            ),
          0n,
        );
  // An account key's request to an open endpoint takes its plan's room too (the first endpoint's;
  // it moves with the request when another one serves it).
  const first = need.routes[0]!;
  return leases.admit({
    accountId: need.accountId,
    tier: need.tier,
    subscriptionId: need.subscriptionId,
    openProductId: !need.subscriptionId && first.open ? first.productId : undefined,
    keyId: need.keyId,
    atLeast: { credit: need.subscriptionId ? 0n : credit, tokens: output },
    likelyCredit: likely,
  });
}

/**
 * A request admitted with its worst case, the routes that worst case covers, in order, and for a
 * scoped key the subscription's terms it was priced by (the answer's `usage.cost` uses them too).
 */
export interface Admitted {
  ticket: Ticket;
  routes: Route[];
  terms: BudgetTerms | undefined;
}

/**
 * Step two, once the prompt is counted: the context check, then the worst case. The output
 * ceiling is the smaller of the model's (or plan's) cap and the context's room. Without
 * max_tokens, or with one at or above the ceiling (lowered, never refused: agents ask for tens of
 * thousands of tokens whatever the model), the cap is the smaller of the ceiling and what the
 * account's credit pays (computed against the whole account when the lease cannot pay it); below
 * it, the client's own. A scoped key's request is limited and priced by its subscription's terms,
 * never the route's. With fallbacks, a model the prompt does not fit is passed over (the first
 * one's error stands when none fits); the others share one ceiling (the smallest of theirs), and
 * the worst case is the largest among them: settlement charges the one that answered, at most that.
 */
export async function admitWorstCase(
  leases: LeaseTable,
  ticket: Ticket,
  need: ChatNeed,
  prompt: bigint,
): Promise<Admitted> {
  const terms = need.subscriptionId ? termsOf(ticket, need.routes) : undefined;
  const fitting: Array<{ route: Route; cap: bigint }> = [];
  let refusal: AppError | undefined;
  for (const route of need.routes) {
    const limits = {
      contextWindow: terms ? min(route.contextWindow, terms.maxContextTokens) : route.contextWindow,
      maxOutputTokensCap: terms ? min(route.maxOutputTokensCap, terms.maxOutputTokens) : route.maxOutputTokensCap,
      inputTokens: prompt,
    };
    try {
      const source = terms && terms.maxContextTokens < route.contextWindow ? "plan" : "model";
      fitting.push({ route, cap: outputCeiling(limits, source) });
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      refusal ??= err;
    }
  }
  if (fitting.length === 0) throw refusal!;
  // An open model's endpoints the balance cannot cover are left out, dearest first, rather than
  // the request refused: credit is held at the dearest endpoint the balance affords.
  for (let left = fitting; ;) {
    try {
      return await takeFor(leases, ticket, need, left, terms, prompt);
    } catch (err) {
      const dearest = left.reduce((most, f) => max(most, pricePer1m(f.route)), 0n);
      const cheaper = left.filter((f) => pricePer1m(f.route) < dearest);
      const open = left.every((f) => f.route.open);
      if (!(err instanceof AppError && err.code === "insufficient_credits" && open && cheaper.length > 0)) throw err;
      left = cheaper;
    }
  }
}

/** A route's input and output price per 1M tokens together (micro-USD). */
const pricePer1m = (route: Route) => route.inputPricePer1mMicros + route.outputPricePer1mMicros;

/** The worst case over `fitting`'s routes, taken from the lease (or a grant). */
async function takeFor(
  leases: LeaseTable,
  ticket: Ticket,
  need: ChatNeed,
  fitting: ReadonlyArray<{ route: Route; cap: bigint }>,
  terms: BudgetTerms | undefined,
  prompt: bigint,
): Promise<Admitted> {
  const { requested, choices } = need;
  const routes = fitting.map((f) => f.route);
  const { price, affordable } = pricing(routes, terms, need.subscriptionId, prompt, choices);
  const cap = fitting.reduce((least, f) => min(least, f.cap), fitting[0]!.cap);
  if (requested > 0n && requested < cap) {
    return { ticket: await leases.takeWorstCase(ticket, price(requested)), routes, terms };
  }
  if (!affordable) return { ticket: await leases.takeWorstCase(ticket, price(cap)), routes, terms };
  const admitted = await leases.takeWorstCase(ticket, price(cap), {
    min: price(1n)(ticket.lease).credit,
    shrink: (spare) => {
      const fits = affordable(spare, ticket.lease) / choices;
      return fits > 0n ? price(min(fits, cap))(ticket.lease) : undefined;
    },
  });
  return { ticket: admitted, routes, terms };
}

/**
 * Step two on the prompt's byte bound (`bound` ≥ its token count) instead of its count, where
 * that changes nothing the client would see: on every route the bound leaves room in the context
 * for the output asked for (or the whole output cap, when none is asked or more), so the checks
 * pass and the caps come out as the count would make them, and the lease covers the bound's worst
 * case from memory. The hold is then larger than the count's by the prompt's bytes over its
 * tokens, at the input price, for the request's life. Undefined otherwise, with nothing taken: the caller counts the prompt and takes
 * the exact worst case (billing is never asked to cover a bound). Plans with included tokens
 * always count: their split between included and overage tokens is decided at admission.
 */
export function admitOnBound(leases: LeaseTable, ticket: Ticket, need: ChatNeed, bound: bigint): Admitted | undefined {
  const terms = need.subscriptionId ? termsOf(ticket, need.routes) : undefined;
  if (terms && hasIncludedTokens(terms.pricingModel)) return undefined;
  let cap: bigint | undefined;
  for (const route of need.routes) {
    const window = terms ? min(route.contextWindow, terms.maxContextTokens) : route.contextWindow;
    const outputCap = terms ? min(route.maxOutputTokensCap, terms.maxOutputTokens) : route.maxOutputTokensCap;
    const output = servedOutputTokens(need.requested, outputCap) || outputCap;
    if (output < 1n || bound + output > window) return undefined;
    cap = cap === undefined ? outputCap : min(cap, outputCap);
  }
  const { price } = pricing(need.routes, terms, need.subscriptionId, bound, need.choices);
  const worstCase = price(servedOutputTokens(need.requested, cap!) || cap!)(ticket.lease);
  const admitted = leases.takeWorstCaseInMemory(ticket, worstCase);
  return admitted && { ticket: admitted, routes: [...need.routes], terms };
}

/**
 * An embeddings request's worst case, once its input is counted: the input at the route's prices,
 * or on a scoped key by its plan as a chat prompt is (payg its input price, free nothing, the
 * subscription kinds from included tokens, then an overage plan's overage price). There is no
 * output, so no cap to decide.
 */
export function embeddingsWorstCase(
  ticket: Ticket,
  routes: readonly Route[],
  subscriptionId: string,
  inputTokens: bigint,
): { worstCase: (lease: HeldLease) => WorstCase; terms: BudgetTerms | undefined } {
  const terms = subscriptionId ? termsOf(ticket, routes) : undefined;
  return { worstCase: pricing(routes, terms, subscriptionId, inputTokens, 1n).price(0n), terms };
}

/** A subscription's terms as the relay prices its answer's `usage.cost` (as settlement will). */
export function termsPricing(terms: BudgetTerms): SubscriptionPricing {
  return {
    pricingModel: terms.pricingModel,
    inputPricePer1mMicros: terms.inputPricePer1mMicros,
    outputPricePer1mMicros: terms.outputPricePer1mMicros,
    overagePricePer1mMicros: terms.overagePricePer1mMicros,
    cachedInputPricePer1mMicros: terms.cachedInputPricePer1mMicros,
  };
}

/** The subscription's terms from its budget (step one opened it), its key kept to its hoster. */
function termsOf(ticket: Ticket, routes: readonly Route[]): BudgetTerms {
  const terms = ticket.lease.budgets.get(ticket.subscriptionId)?.terms;
  if (!terms) throw new AppError("service_unavailable", "The subscription's terms are not known yet; please retry.");
  // Registry routes a scoped key to its own hoster only; anything else is refused, never priced.
  if (routes.some((route) => route.provider !== "hoster" || route.hosterId !== terms.hosterId)) {
    throw new AppError("forbidden", "This key may call only its subscription's hoster models.");
  }
  return terms;
}

/**
 * The worst case of `maxOutput` tokens per choice (docs/architecture.md#admission-on-a-lease): at the dearest route's prices
 * for an account key (any of its routes may answer); for a subscription by its pricing model: payg at the plan's prices, free and
 * subscription nothing, an overage plan the overage price on the tokens its budget's included
 * room does not cover (so the split between included and overage tokens is decided here).
 * `affordable` (when credit limits the cap) is the most output tokens, all choices together,
 * that a spare credit pays for after the prompt on every route.
 */
function pricing(
  routes: readonly Route[],
  terms: BudgetTerms | undefined,
  subscriptionId: string,
  prompt: bigint,
  choices: bigint,
) {
  // Only an overage plan's pricing depends on the lease (the included tokens its budget has now).
  let pricingsIn: (lease: HeldLease) => readonly RequestPricing[];
  let charged: boolean;
  if (!terms) {
    const prices = routePricings(routes);
    pricingsIn = () => prices;
    charged = chargesAnything(prices);
  } else if (chargesOverage(terms.pricingModel)) {
    pricingsIn = (lease) => [subscriptionPricing(terms, includedSpare(lease, subscriptionId))];
    charged = chargesAnything([subscriptionPricing(terms, 0n)]);
  } else {
    const prices = [subscriptionPricing(terms, 0n)];
    pricingsIn = () => prices;
    charged = chargesAnything(prices);
  }
  const price =
    (maxOutputTokens: bigint) =>
    (lease: HeldLease): WorstCase => {
      const outputTokens = maxOutputTokens * choices;
      return {
        credit: worstCaseCharge({ inputTokens: prompt, outputTokens }, pricingsIn(lease)),
        tokens: prompt + outputTokens,
        maxOutputTokens,
      };
    };
  const affordable = (spare: bigint, lease: HeldLease): bigint => affordableOutput(spare, prompt, pricingsIn(lease));
  return { price, affordable: charged ? affordable : undefined };
}

/** A subscription's request priced by its budget's terms, with the included tokens it takes. */
function subscriptionPricing(terms: BudgetTerms, includedTokens: bigint): RequestPricing {
  const prices = {
    inputPricePer1m: terms.inputPricePer1mMicros,
    outputPricePer1m: terms.outputPricePer1mMicros,
    overagePricePer1m: terms.overagePricePer1mMicros,
  };
  return planPricing(terms.pricingModel, prices, includedTokens);
}

/** An account key's request at the prices of each route that may answer it. */
function routePricings(routes: readonly Route[]): RequestPricing[] {
  return routes.map((route) => ({
    inputPricePer1m: route.inputPricePer1mMicros,
    outputPricePer1m: route.outputPricePer1mMicros,
  }));
}

/** Included tokens the subscription's budget in this lease can still take now. */
function includedSpare(lease: HeldLease, subscriptionId: string): bigint {
  const now = performance.now();
  const room = lease.budgets
    .get(subscriptionId)
    ?.rooms.find(
      (r) => r.resource === LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS && r.usableFrom <= now && now < r.validUntil,
    );
  const spare = room ? lease.spare(room) : 0n;
  return spare > 0n ? spare : 0n;
}

/**
 * The x-ratelimit-*-requests headers: the per-minute limit and the requests this edge's lease
 * can still admit this minute (exact on one edge; on several, what this one can vouch for). For
 * a scoped key, the account's or the plan's, whichever has less left.
 */
export function rateLimitHeaders(reply: FastifyReply, ticket: Ticket): void {
  const { lease } = ticket;
  const now = performance.now();
  const spareIn = (rooms: readonly Room[]) => {
    const room = rooms.find(
      (r) =>
        r.resource === LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE && r.usableFrom <= now && now < r.validUntil,
    );
    const spare = room ? lease.spare(room) : 0n;
    return spare > 0n ? spare : 0n;
  };
  let limit = lease.limitPerMinute;
  let remaining = spareIn(lease.rooms);
  const budget = ticket.subscriptionId ? lease.budgets.get(ticket.subscriptionId) : undefined;
  // The lease lends an account no more than it asks for, so a tie goes to the plan's figures.
  if (budget?.terms && spareIn(budget.rooms) <= remaining) {
    limit = budget.terms.rpmLimit;
    remaining = spareIn(budget.rooms);
  }
  if (limit <= 0n) return;
  reply.header("x-ratelimit-limit-requests", String(limit));
  reply.header("x-ratelimit-remaining-requests", String(remaining));
  reply.header("x-ratelimit-reset-requests", `${Math.max(1, Math.ceil((60_000 - (Date.now() % 60_000)) / 1000))}s`);
}
