import type { FastifyInstance } from "fastify";
import { GetUsageSummaryRequest } from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";
import { principalOf, usageOwnerOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { ROLLUP_LAG } from "./usage-reports.ts";
import { integer, number, object, replies, string, usd } from "./response-schemas.ts";

/** GET /v1/usage: the spec's usage summary for the caller's account. */
export function usageRoutes(app: FastifyInstance, deps: RouteDeps): void {
  app.get(
    "/v1/usage",
    {
      onRequest: deps.auth({ allowScoped: true, acceptSession: true }),
      schema: {
        summary: "Credit balance, rate limits and the last 30 days of usage",
        description: `${ROLLUP_LAG} The credit balance moves as soon as the request settles.`,
        response: replies(
          200,
          object({
            customer: string(),
            tier: string(),
            credit_balance_usd: usd(),
            rate_limits: object({
              requests_this_minute: integer(),
              requests_today: integer(),
              limit_per_minute: integer(),
              limit_per_day: integer(),
              remaining_this_minute: integer(),
              remaining_today: integer(),
            }),
            usage_30d: object({
              total_requests: integer(),
              total_input_tokens: integer(),
              total_cached_input_tokens: integer(),
              total_output_tokens: integer(),
              total_cost_microdollars: integer(),
              avg_latency_ms: number(),
            }),
          }),
        ),
        tags: ["usage"],
        security: [{ apiKey: [] }],
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const summary = await deps.backends.billing.getUsageSummary(
        GetUsageSummaryRequest.fromPartial({ ...usageOwnerOf(request), tier: principal.tier }),
      );
      const limits = summary.rateLimits;
      const usage = summary.usage30d;
      return {
        customer: principal.email,
        tier: principal.tier,
        credit_balance_usd: microsToUsd(summary.creditBalanceMicros),
        rate_limits: {
          requests_this_minute: Number(limits?.requestsThisMinute ?? 0n),
          requests_today: Number(limits?.requestsToday ?? 0n),
          limit_per_minute: Number(limits?.limitPerMinute ?? 0n),
          limit_per_day: Number(limits?.limitPerDay ?? 0n),
          remaining_this_minute: Number(limits?.remainingThisMinute ?? 0n),
          remaining_today: Number(limits?.remainingToday ?? 0n),
        },
        usage_30d: {
          total_requests: Number(usage?.totalRequests ?? 0n),
          total_input_tokens: Number(usage?.totalInputTokens ?? 0n),
          total_cached_input_tokens: Number(usage?.totalCachedInputTokens ?? 0n),
          total_output_tokens: Number(usage?.totalOutputTokens ?? 0n),
          total_cost_microdollars: Number(usage?.totalCostMicros ?? 0n),
          avg_latency_ms: usage?.avgLatencyMs ?? 0,
        },
      };
    },
  );
}
