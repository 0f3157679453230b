import type { FastifyInstance } from "fastify";
import { GetUsageBreakdownRequest, GetUsageTokensRequest } from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";
import { usageOwnerOf } from "../plugins/api-key-auth.ts";
import { avgLatencyMs, renderFigures } from "../usage/render-usage.ts";
import { daysQuerySchema, tokensQuerySchema, type DaysQuery, type TokensQuery } from "../usage/usage-query.ts";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, integer, number, object, replies, string, usd } from "./response-schemas.ts";

/** What every usage report says of its freshness (docs/settlement.md#rollups-folded-off-the-settlement-transaction). */
export const ROLLUP_LAG =
  "Requests, tokens and costs come from rollups that billing folds every 2 s by default: a request " +
  "appears here up to about that long after it settled.";

/** GET /v1/usage/tokens and /v1/usage/breakdown: the spec's usage reports, from billing's rollups. */
export function usageReportRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.get(
    "/v1/usage/tokens",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "Token usage series: one zero-filled entry per hour, day, week or month (UTC)",
        description: ROLLUP_LAG,
        response: replies(
          200,
          object({
            period_days: integer(),
            interval: string(),
            totals: object({
              input_tokens: integer(),
              cached_input_tokens: integer(),
              output_tokens: integer(),
              total_tokens: integer(),
              cost_usd: usd(),
              requests: integer(),
            }),
            timeseries: arrayOf(
              object({
                period: string(),
                input_tokens: integer(),
                cached_input_tokens: integer(),
                output_tokens: integer(),
                total_tokens: integer(),
                cost_usd: usd(),
                requests: integer(),
                local_requests: integer(),
                hoster_requests: integer(),
                cloud_requests: integer(),
                avg_latency_ms: number(),
              }),
            ),
          }),
        ),
        tags: ["usage"],
        security: [{ apiKey: [] }],
        querystring: tokensQuerySchema,
      },
    },
    async (request) => {
      const { days, interval } = request.query as TokensQuery;
      const report = await deps.backends.billing.getUsageTokens(
        GetUsageTokensRequest.fromPartial({ ...usageOwnerOf(request), days, interval }),
      );
      return {
        period_days: days,
        interval,
        totals: renderFigures(report.totals),
        timeseries: report.timeseries.map((bucket) => ({
          period: bucket.period,
          ...renderFigures(bucket.figures),
          local_requests: Number(bucket.localRequests),
          hoster_requests: Number(bucket.hosterRequests),
          cloud_requests: Number(bucket.cloudRequests),
          avg_latency_ms: avgLatencyMs(bucket.figures),
        })),
      };
    },
  );

  app.get(
    "/v1/usage/breakdown",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "Cost breakdown by model (with the platform fee and hoster share) and by UTC day",
        description: ROLLUP_LAG,
        response: replies(
          200,
          object({
            period_days: integer(),
            by_model: arrayOf(
              object({
                model_id: string(),
                provider: string(),
                requests: integer(),
                input_tokens: integer(),
                cached_input_tokens: integer(),
                output_tokens: integer(),
                total_cost_usd: usd(),
                platform_fee_usd: usd(),
                hoster_earned_usd: usd(),
                avg_latency_ms: number(),
              }),
            ),
            daily: arrayOf(
              object({
                date: string(),
                requests: integer(),
                input_tokens: integer(),
                cached_input_tokens: integer(),
                output_tokens: integer(),
                total_cost_usd: usd(),
              }),
            ),
          }),
        ),
        tags: ["usage"],
        security: [{ apiKey: [] }],
        querystring: daysQuerySchema,
      },
    },
    async (request) => {
      const { days } = request.query as DaysQuery;
      const report = await deps.backends.billing.getUsageBreakdown(
        GetUsageBreakdownRequest.fromPartial({ ...usageOwnerOf(request), days }),
      );
      return {
        period_days: days,
        by_model: report.byModel.map((model) => {
          const figures = renderFigures(model.figures);
          return {
            model_id: model.modelId,
            provider: model.provider,
            requests: figures.requests,
            input_tokens: figures.input_tokens,
            cached_input_tokens: figures.cached_input_tokens,
            output_tokens: figures.output_tokens,
            total_cost_usd: figures.cost_usd,
            platform_fee_usd: microsToUsd(model.platformFeeMicros),
            hoster_earned_usd: microsToUsd(model.hosterEarnedMicros),
            avg_latency_ms: avgLatencyMs(model.figures),
          };
        }),
        daily: report.daily.map((day) => {
          const figures = renderFigures(day.figures);
          return {
            date: day.date,
            requests: figures.requests,
            input_tokens: figures.input_tokens,
            cached_input_tokens: figures.cached_input_tokens,
            output_tokens: figures.output_tokens,
            total_cost_usd: figures.cost_usd,
          };
        }),
      };
    },
  );
}
