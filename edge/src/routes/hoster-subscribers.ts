import type { FastifyInstance } from "fastify";
import {
  ListHosterSubscribersRequest,
  PauseSubscriptionRequest,
  ResumeSubscriptionRequest,
  type HosterSubscriber,
} from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";
import { principalSession } from "../plugins/session-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { arrayOf, integer, nullableString, object, replies, string, usd } from "./response-schemas.ts";

/** A subscriber as its hoster sees it: billing masked the e-mail; the full address never comes here. */
function renderSubscriber(s: HosterSubscriber | undefined) {
  return {
    object: "hoster.subscriber",
    subscription_id: s?.subscriptionId ?? "",
    product_id: s?.productId ?? "",
    product_name: s?.productName ?? "",
    status: s?.status ?? "",
    email_masked: s?.emailMasked ?? "",
    period_end: s?.periodEnd || null,
    requests: Number(s?.requests ?? 0n),
    total_tokens: Number(s?.totalTokens ?? 0n),
    created_at: s?.createdAt ?? "",
  };
}

const subscriberSchema = object({
  object: string("`hoster.subscriber`"),
  subscription_id: string(),
  product_id: string(),
  product_name: string(),
  status: string(),
  email_masked: string(),
  period_end: nullableString(),
  requests: integer(),
  total_tokens: integer(),
  created_at: string(),
});

const subscriberParams = {
  type: "object",
  required: ["subscription_id"],
  properties: { subscription_id: { type: "string", maxLength: 64 } },
} as const;

/**
 * GET /v1/hoster/subscribers and the portal actions POST /hosters/subscribers/{id}/pause and
 * /resume, for the session's hoster only: another hoster's subscriber is 404.
 */
export function hosterSubscriberRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const onRequest = deps.session("hoster");
  const tags = ["hosters"];

  app.get(
    "/v1/hoster/subscribers",
    {
      onRequest,
      schema: {
        summary: "Your plans with subscriber counts and earnings, and your subscribers (e-mails masked)",
        response: replies(
          200,
          object({
            plans: arrayOf(
              object({ product_id: string(), product_name: string(), subscribers: integer(), earned_usd: usd() }),
            ),
            subscribers: arrayOf(subscriberSchema),
          }),
        ),
        tags,
      },
    },
    async (request) => {
      const res = await deps.backends.billing.listHosterSubscribers(
        ListHosterSubscribersRequest.fromPartial({ hosterId: principalSession(request).subjectId }),
      );
      return {
        plans: res.plans.map((plan) => ({
          product_id: plan.productId,
          product_name: plan.productName,
          subscribers: Number(plan.subscribers),
          earned_usd: microsToUsd(plan.earnedMicros),
        })),
        subscribers: res.subscribers.map(renderSubscriber),
      };
    },
  );

  app.post<{ Params: { subscription_id: string } }>(
    "/hosters/subscribers/:subscription_id/pause",
    {
      onRequest,
      schema: {
        summary: "Pause a subscriber: their key is refused (403) until resumed; renewals continue",
        response: replies(200, subscriberSchema),
        tags,
        params: subscriberParams,
      },
    },
    async (request) => {
      const { subscriber } = await deps.backends.billing.pauseSubscription(
        PauseSubscriptionRequest.fromPartial({
          hosterId: principalSession(request).subjectId,
          subscriptionId: request.params.subscription_id,
        }),
      );
      return renderSubscriber(subscriber);
    },
  );

  app.post<{ Params: { subscription_id: string } }>(
    "/hosters/subscribers/:subscription_id/resume",
    {
      onRequest,
      schema: {
        summary: "Resume a paused subscriber",
        response: replies(200, subscriberSchema),
        tags,
        params: subscriberParams,
      },
    },
    async (request) => {
      const { subscriber } = await deps.backends.billing.resumeSubscription(
        ResumeSubscriptionRequest.fromPartial({
          hosterId: principalSession(request).subjectId,
          subscriptionId: request.params.subscription_id,
        }),
      );
      return renderSubscriber(subscriber);
    },
  );
}
