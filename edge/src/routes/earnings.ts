import type { FastifyInstance } from "fastify";
import { GetHosterEarningsByModelRequest, GetHosterEarningsRequest } from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";
import { principalSession } from "../plugins/session-auth.ts";
import { daysQuerySchema, type DaysQuery } from "../usage/usage-query.ts";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, boolean, integer, object, replies, string, usd } from "./response-schemas.ts";

/**
 * GET /v1/earnings and /v1/earnings/by-model (docs/architecture.md#the-path-of-a-dollar): the session's hoster's posted shares,
 * from billing. The hoster is always the session's; there is no parameter naming another.
 */
export function earningsRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const onRequest = deps.session("hoster");
  const tags = ["hosters"];

  app.get(
    "/v1/earnings",
    {
      onRequest,
      schema: {
        summary: "Your earnings: subscription fees and per-request shares, by plan and by UTC day",
        response: replies(
          200,
          object({
            period_days: integer(),
            total_earned_usd: usd(),
            payable_usd: usd(),
            payout_threshold_usd: usd(),
            payout_eligible: boolean(),
            by_plan: arrayOf(
              object({
                product_id: string(),
                product_name: string(),
                pricing_model: string(),
                subscribers: integer(),
                subscription_fees_usd: usd(),
                usage_earned_usd: usd(),
                earned_usd: usd(),
              }),
            ),
            daily: arrayOf(object({ date: string(), earned_usd: usd() })),
          }),
        ),
        tags,
        querystring: daysQuerySchema,
      },
    },
    async (request) => {
      const { days } = request.query as DaysQuery;
      const report = await deps.backends.billing.getHosterEarnings(
        GetHosterEarningsRequest.fromPartial({ hosterId: principalSession(request).subjectId, days }),
      );
      return {
        period_days: days,
        total_earned_usd: microsToUsd(report.totalEarnedMicros),
        payable_usd: microsToUsd(report.payableMicros),
        payout_threshold_usd: microsToUsd(report.payoutThresholdMicros),
        payout_eligible: report.payoutEligible,
        by_plan: report.byPlan.map((plan) => ({
          product_id: plan.productId,
          product_name: plan.productName,
          pricing_model: plan.pricingModel,
          subscribers: Number(plan.subscribers),
          subscription_fees_usd: microsToUsd(plan.subscriptionFeesMicros),
          usage_earned_usd: microsToUsd(plan.usageEarnedMicros),
          earned_usd: microsToUsd(plan.earnedMicros),
        })),
        daily: report.daily.map((day) => ({ date: day.date, earned_usd: microsToUsd(day.earnedMicros) })),
      };
    },
  );

  app.get(
    "/v1/earnings/by-model",
    {
      onRequest,
      schema: {
        summary: "Your per-request earnings by model (subscription fees are in /v1/earnings)",
        response: replies(
          200,
          object({
            period_days: integer(),
            by_model: arrayOf(
              object({
                model_id: string(),
                requests: integer(),
                input_tokens: integer(),
                output_tokens: integer(),
                gross_usd: usd(),
                earned_usd: usd(),
              }),
            ),
          }),
        ),
        tags,
        querystring: daysQuerySchema,
      },
    },
    async (request) => {
      const { days } = request.query as DaysQuery;
      const report = await deps.backends.billing.getHosterEarningsByModel(
        GetHosterEarningsByModelRequest.fromPartial({ hosterId: principalSession(request).subjectId, days }),
      );
      return {
        period_days: days,
        by_model: report.byModel.map((model) => ({
          model_id: model.modelId,
          requests: Number(model.requests),
          input_tokens: Number(model.inputTokens),
          output_tokens: Number(model.outputTokens),
          gross_usd: microsToUsd(model.grossMicros),
          earned_usd: microsToUsd(model.earnedMicros),
        })),
      };
    },
  );
}
