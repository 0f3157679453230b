import { isUuid } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import type { Product } from "@mkt/proto/registry/v1/registry";
import { int8, type BillingContext, type Em } from "../context.ts";
import { ledgerAccounts } from "../wallets/ledger.ts";

/** Statuses counted as a plan's subscribers: everyone who still holds the plan. */
export const SUBSCRIBER_STATUSES_SQL = `'active', 'paused', 'past_due'`;

export function requireHoster(hosterId: string): string {
  if (!isUuid(hosterId)) throw new AppError("invalid_request", "hoster_id must be a UUID", { param: "hoster_id" });
  return hosterId.toLowerCase();
}

/** A time range of a hoster report: postings by time, rollup rows by UTC day (`to` exclusive). */
export interface EarningsWindow {
  from: string;
  to: string;
}

/** One plan's figures; product_id "" gathers usage no subscription could be found for. */
export interface PlanFigures {
  productId: string;
  productName: string;
  pricingModel: string;
  subscribers: bigint;
  feesMicros: bigint;
  usageMicros: bigint;
}

/**
 * The hoster's plans as registry has them now, archived ones included. Read before a report's
 * snapshot transaction opens, so no network call runs inside it.
 */
export async function hosterProducts(ctx: BillingContext, hosterId: string): Promise<Product[]> {
  return (await ctx.registry.listProducts({ hosterId }, { timeoutMs: 10_000 })).products;
}

/**
 * What each of the hoster's plans earned it (in `window`, or all time): subscription fees from the
 * ledger (the hoster's postings of kind subscription_fee, dated when posted), per-request shares
 * from the hoster rollup (dated by the request's UTC day, as usage reports are). Every plan the
 * hoster has in registry is listed, archived ones included, then any other plan billing has seen;
 * names are registry's current ones. Highest earnings first, then registry's order.
 */
export async function planFigures(
  em: Em,
  hosterId: string,
  products: Product[],
  window?: EarningsWindow,
): Promise<PlanFigures[]> {
  const fees = await feesByPlan(em, hosterId, window);
  const usage = await usageByPlan(em, hosterId, window);
  const held = await em.execute(
    `select product_id, count(*) filter (where status in (${SUBSCRIBER_STATUSES_SQL})) as subscribers,
       max(product_name) as product_name, max(pricing_model) as pricing_model
     from subscriptions where hoster_id = ? and status in (${SUBSCRIBER_STATUSES_SQL}, 'cancelled')
     group by product_id`,
    [hosterId],
  );
  const subscribers = new Map(held.map((r) => [r.product_id as string, int8(r.subscribers)]));

  const plans = new Map<string, PlanFigures>();
  const add = (productId: string, productName: string, pricingModel: string) => {
    if (plans.has(productId)) return;
    plans.set(productId, {
      productId,
      productName,
      pricingModel,
      subscribers: subscribers.get(productId) ?? 0n,
      feesMicros: fees.get(productId) ?? 0n,
      usageMicros: usage.get(productId) ?? 0n,
    });
  };
  for (const product of products) {
    add(product.productId, product.terms?.name ?? "", product.terms?.pricingModel ?? "");
  }
  for (const row of held) {
    add(
      row.product_id as string,
      (row.product_name as string | null) ?? "",
      (row.pricing_model as string | null) ?? "",
    );
  }
  // Only if something was earned outside any known plan (usage of a key no subscription names).
  if ((usage.get("") ?? 0n) !== 0n) add("", "", "");
  const earned = (p: PlanFigures) => p.feesMicros + p.usageMicros;
  return [...plans.values()]
    .map((plan, order) => ({ plan, order }))
    .sort((a, b) => (earned(b.plan) > earned(a.plan) ? 1 : earned(b.plan) < earned(a.plan) ? -1 : a.order - b.order))
    .map(({ plan }) => plan);
}

/** The hoster's subscription fees per plan. The fee's reference starts with its subscription id. */
async function feesByPlan(em: Em, hosterId: string, window?: EarningsWindow): Promise<Map<string, bigint>> {
  const rows = await em.execute(
    `select s.product_id, sum(p.amount_micros) as micros
     from ledger_postings p
     join journal_entries e on e.id = p.entry_id and e.kind = 'subscription_fee'
     join subscriptions s on s.id = split_part(e.reference, ':', 1)::uuid
     where p.ledger_account = ? ${window ? "and p.created_at >= ?::timestamptz and p.created_at < ?::timestamptz" : ""}
     group by s.product_id`,
    [ledgerAccounts.hoster(hosterId), ...(window ? [window.from, window.to] : [])],
  );
  return new Map(rows.map((r) => [r.product_id as string, int8(r.micros)]));
}

/** The hoster's per-request shares per plan: rollup rows tied to a subscription by the scoped key. */
async function usageByPlan(em: Em, hosterId: string, window?: EarningsWindow): Promise<Map<string, bigint>> {
  const rows = await em.execute(
    `with subs as (select product_id, key_id from subscriptions where hoster_id = ? and key_id is not null)
     select coalesce(subs.product_id::text, '') as product_id, sum(r.hoster_earned_micros) as micros
     from hoster_usage_daily r left join subs on subs.key_id = r.key_id
     where r.hoster_id = ? ${window ? `and ${DAY_IN_WINDOW}` : ""}
     group by 1`,
    [hosterId, hosterId, ...(window ? [window.from, window.to] : [])],
  );
  return new Map(rows.map((r) => [r.product_id as string, int8(r.micros)]));
}

/** Rollup days (alias r) inside a window given as UTC-midnight timestamptz text. */
export const DAY_IN_WINDOW = `r.day >= (?::timestamptz at time zone 'UTC')::date
  and r.day < (?::timestamptz at time zone 'UTC')::date`;

/**
 * Everything ever earned by the hoster: all its fee postings plus all its per-request shares. The
 * rollup's shares equal its usage postings (settlement writes both from one figure, and a test
 * holds them to it), and reading the rollup saves summing one posting per request ever served.
 */
export async function allTimeEarned(em: Em, hosterId: string): Promise<bigint> {
  const [row] = await em.execute(
    `select (select coalesce(sum(p.amount_micros), 0) from ledger_postings p
             join journal_entries e on e.id = p.entry_id and e.kind = 'subscription_fee'
             where p.ledger_account = ?)
          + (select coalesce(sum(hoster_earned_micros), 0) from hoster_usage_daily where hoster_id = ?) as micros`,
    [ledgerAccounts.hoster(hosterId), hosterId],
  );
  return int8(row?.micros);
}
