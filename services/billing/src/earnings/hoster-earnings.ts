import { IsolationLevel } from "@mikro-orm/core";
import type {
  GetHosterEarningsByModelRequest,
  GetHosterEarningsByModelResponse,
  GetHosterEarningsRequest,
  GetHosterEarningsResponse,
} from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext, type Em } from "../context.ts";
import { reportWindow, requireDays } from "../usage/usage-window.ts";
import { ledgerAccounts } from "../wallets/ledger.ts";
import {
  allTimeEarned,
  DAY_IN_WINDOW,
  hosterProducts,
  planFigures,
  requireHoster,
  type EarningsWindow,
} from "./hoster-plans.ts";

/** The spec's minimum payout (Limits): 10 USD. */
export const PAYOUT_THRESHOLD_MICROS = 10_000_000n;

/** Read in one snapshot, so every figure of a report describes the same postings. */
const SNAPSHOT = { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true } as const;

/**
 * GET /v1/earnings: what was posted to the hoster's ledger account, never a share recomputed
 * from totals. The window is the usage reports' (whole UTC days from the one holding now - days
 * through today). `payable` is everything ever posted to the hoster (no payouts exist yet).
 */
export async function hosterEarnings(
  ctx: BillingContext,
  req: GetHosterEarningsRequest,
): Promise<GetHosterEarningsResponse> {
  const hosterId = requireHoster(req.hosterId);
  const days = requireDays(req.days);
  const products = await hosterProducts(ctx, hosterId);
  return ctx.orm.em.fork().transactional(async (em) => {
    const window = await reportWindow(em, ctx.clock(), days, "day");
    const plans = await planFigures(em, hosterId, products, window);
    const daily = await dailyEarnings(em, hosterId, window);
    // Minus payouts, when there are any: cash payouts are not available yet (spec, Limits).
    const payable = await allTimeEarned(em, hosterId);
    const byPlan = plans.map((p) => ({
      productId: p.productId,
      productName: p.productName,
      pricingModel: p.pricingModel,
      subscribers: p.subscribers,
      subscriptionFeesMicros: p.feesMicros,
      usageEarnedMicros: p.usageMicros,
      earnedMicros: p.feesMicros + p.usageMicros,
    }));
    return {
      totalEarnedMicros: byPlan.reduce((sum, p) => sum + p.earnedMicros, 0n),
      payableMicros: payable,
      payoutThresholdMicros: PAYOUT_THRESHOLD_MICROS,
      payoutEligible: payable >= PAYOUT_THRESHOLD_MICROS,
      byPlan,
      daily,
    };
  }, SNAPSHOT);
}

/** One entry per UTC day of the window, zero-filled: the day's fees plus its requests' shares. */
async function dailyEarnings(em: Em, hosterId: string, window: EarningsWindow) {
  const rows = await em.execute(
    `with fees as (
       select (p.created_at at time zone 'UTC')::date as day, sum(p.amount_micros) as micros
       from ledger_postings p join journal_entries e on e.id = p.entry_id and e.kind = 'subscription_fee'
       where p.ledger_account = ? and p.created_at >= ?::timestamptz and p.created_at < ?::timestamptz
       group by 1
     ), shares as (
       select r.day, sum(r.hoster_earned_micros) as micros from hoster_usage_daily r
       where r.hoster_id = ? and ${DAY_IN_WINDOW} group by 1
     )
     select to_char(days.day, 'YYYY-MM-DD') as date,
       coalesce(fees.micros, 0) + coalesce(shares.micros, 0) as micros
     from generate_series(
       (?::timestamptz at time zone 'UTC')::date,
       (?::timestamptz at time zone 'UTC')::date - 1,
       interval '1 day'
     ) as days (day)
     left join fees on fees.day = days.day::date
     left join shares on shares.day = days.day::date
     order by days.day`,
    [ledgerAccounts.hoster(hosterId), window.from, window.to, hosterId, window.from, window.to, window.from, window.to],
  );
  return rows.map((r) => ({ date: r.date as string, earnedMicros: int8(r.micros) }));
}

/**
 * GET /v1/earnings/by-model: the hoster's requests per model in the window, what customers were
 * charged for them and the hoster's posted shares, from the hoster rollup. Subscription fees are
 * not per model and are not here.
 */
export async function hosterEarningsByModel(
  ctx: BillingContext,
  req: GetHosterEarningsByModelRequest,
): Promise<GetHosterEarningsByModelResponse> {
  const hosterId = requireHoster(req.hosterId);
  const days = requireDays(req.days);
  return ctx.orm.em.fork().transactional(async (em) => {
    const window = await reportWindow(em, ctx.clock(), days, "day");
    const rows = await em.execute(
      `select r.model_id, sum(r.requests) as requests, sum(r.input_tokens) as input_tokens,
         sum(r.output_tokens) as output_tokens, sum(r.cost_micros) as cost_micros,
         sum(r.hoster_earned_micros) as earned_micros
       from hoster_usage_daily r where r.hoster_id = ? and ${DAY_IN_WINDOW}
       group by r.model_id
       order by sum(r.hoster_earned_micros) desc, sum(r.requests) desc, r.model_id`,
      [hosterId, window.from, window.to],
    );
    return {
      byModel: rows.map((r) => ({
        modelId: r.model_id as string,
        requests: int8(r.requests),
        inputTokens: int8(r.input_tokens),
        outputTokens: int8(r.output_tokens),
        grossMicros: int8(r.cost_micros),
        earnedMicros: int8(r.earned_micros),
      })),
    };
  }, SNAPSHOT);
}
