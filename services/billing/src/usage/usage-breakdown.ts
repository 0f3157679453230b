import { IsolationLevel } from "@mikro-orm/core";
import type { GetUsageBreakdownRequest, GetUsageBreakdownResponse } from "@mkt/proto/billing/v1/billing";
import { billingDb } from "../billing-db.ts";
import { int8, type BillingContext } from "../context.ts";
import { figuresOf, NO_USAGE, usageSeries } from "./usage-series.ts";
import { ownerWhere, usageOwner } from "./usage-owner.ts";
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
  const days = requireDays(request.days);
  return ctx.orm.em.fork().transactional(
    async (em) => {
      const window = await reportWindow(em, ctx.clock(), days, "day");
      const db = await billingDb(em);
      const models = await db
        .selectFrom("usage_hourly")
        .select((eb) => [
          "model_id",
          "provider",
          eb.fn.sum<string>("requests").as("requests"),
          eb.fn.sum<string>("input_tokens").as("input_tokens"),
          eb.fn.sum<string>("output_tokens").as("output_tokens"),
          eb.fn.sum<string>("cost_micros").as("cost_micros"),
          eb.fn.sum<string>("latency_ms_sum").as("latency_ms_sum"),
          eb.fn.sum<string>("platform_fee_micros").as("platform_fee_micros"),
          eb.fn.sum<string>("hoster_earned_micros").as("hoster_earned_micros"),
          eb.fn.sum<string>("cached_input_tokens").as("cached_input_tokens"),
        ])
        .where(ownerWhere(owner))
        .where("hour", ">=", window.from)
        .where("hour", "<", window.to)
        .groupBy(["model_id", "provider"])
        .orderBy((eb) => eb.fn.sum("cost_micros"), "desc")
        .orderBy((eb) => eb.fn.sum("requests"), "desc")
        .orderBy("model_id")
        .orderBy("provider")
        .execute();
      const dailyBuckets = await usageSeries(em, owner, window, "day");
      return {
        byModel: models.map((row) => ({
          modelId: row.model_id,
          provider: row.provider,
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
