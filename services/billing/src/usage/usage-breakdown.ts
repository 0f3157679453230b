import { IsolationLevel } from "@mikro-orm/core";
import type { GetUsageBreakdownRequest, GetUsageBreakdownResponse } from "@mkt/proto/billing/v1/billing";
import { int8, type BillingContext } from "../context.ts";
import { figuresOf, NO_USAGE, usageSeries } from "./usage-series.ts";
import { ownerCondition, usageOwner } from "./usage-owner.ts";
import { reportWindow, requireDays } from "./usage-window.ts";

/**
 * GET /v1/usage/breakdown: per model and per UTC day, from the hourly rollups. Fees are sums of
 * the posted shares (never 20% of a total), so platform fee + hoster earnings equal the cost
 * exactly. Both parts are read in one snapshot so they describe the same settled requests.
 */
export async function usageBreakdown(
  ctx: BillingContext,
  request: GetUsageBreakdownRequest,
): Promise<GetUsageBreakdownResponse> {
  const owner = usageOwner(request);
  const whose = ownerCondition(owner);
  const days = requireDays(request.days);
  return ctx.orm.em.fork().transactional(
    async (em) => {
      const window = await reportWindow(em, ctx.clock(), days, "day");
      const models = await em.execute(
        `select model_id, provider, sum(requests) as requests, sum(input_tokens) as input_tokens,
           sum(output_tokens) as output_tokens, sum(cost_micros) as cost_micros,
           sum(latency_ms_sum) as latency_ms_sum, sum(platform_fee_micros) as platform_fee_micros,
           sum(hoster_earned_micros) as hoster_earned_micros, sum(cached_input_tokens) as cached_input_tokens
         from usage_hourly
         where ${whose.sql} and hour >= ?::timestamptz and hour < ?::timestamptz
         group by model_id, provider
         order by sum(cost_micros) desc, sum(requests) desc, model_id, provider`,
        [...whose.params, window.from, window.to],
      );
      const dailyBuckets = await usageSeries(em, owner, window, "day");
      return {
        byModel: models.map((row) => ({
          modelId: row.model_id as string,
          provider: row.provider as string,
          figures: figuresOf(row),
          platformFeeMicros: int8(row.platform_fee_micros),
          hosterEarnedMicros: int8(row.hoster_earned_micros),
        })),
        daily: dailyBuckets.map((bucket) => ({
          date: bucket.period.slice(0, 10),
          figures: bucket.figures ?? NO_USAGE,
        })),
      };
    },
    { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true },
  );
}
