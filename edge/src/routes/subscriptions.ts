import type { FastifyInstance } from "fastify";
import {
  CancelSubscriptionRequest,
  CreateSubscriptionRequest,
  ListSubscriptionsRequest,
  type Subscription,
} from "@mkt/proto/billing/v1/billing";
import { microsToUsd } from "@mkt/runtime/money";
import { principalOf } from "../plugins/api-key-auth.ts";
import type { RouteDeps } from "./route-deps.ts";
import { noStore } from "../plugins/security-headers.ts";
import { listOf, nullableString, object, replies, string, usd } from "./response-schemas.ts";

const subscriptionProperties = {
  object: string("`subscription`"),
  subscription_id: string(),
  product_id: string(),
  product_name: string(),
  hoster_id: string(),
  hoster_name: string(),
  status: string(),
  pricing_model: string(),
  monthly_price_usd: usd(),
  period_start: nullableString(),
  period_end: nullableString(),
  created_at: string(),
  cancelled_at: nullableString(),
  origin: string(
    "`subscribed` (POST /v1/subscriptions) or `open` (made by the account's first call to an open plan: no key, no fee)",
  ),
};

/** A subscription as the API shows it; the key appears only where it is created. */
function renderSubscription(s: Subscription | undefined) {
  return {
    object: "subscription",
    subscription_id: s?.subscriptionId ?? "",
    product_id: s?.productId ?? "",
    product_name: s?.productName ?? "",
    hoster_id: s?.hosterId ?? "",
    hoster_name: s?.hosterName ?? "",
    status: s?.status ?? "",
    pricing_model: s?.terms?.pricingModel ?? "",
    monthly_price_usd: microsToUsd(s?.terms?.monthlyPriceMicros ?? 0n),
    period_start: s?.periodStart || null,
    period_end: s?.periodEnd || null,
    created_at: s?.createdAt ?? "",
    cancelled_at: s?.cancelledAt || null,
    origin: s?.origin || "subscribed",
  };
}

interface Create {
  Body: { product_id: string };
  Headers: { "idempotency-key"?: string };
}

/**
 * POST/GET /v1/subscriptions and DELETE /v1/subscriptions/{subscription_id}: the caller's plan
 * subscriptions. Billing runs the saga; a scoped key cannot manage subscriptions (403).
 */
export function subscriptionRoutes(app: FastifyInstance, deps: RouteDeps): void {
  const auth = deps.auth({ allowScoped: false, acceptSession: true });
  const security = [{ apiKey: [] }];

  app.post<Create>(
    "/v1/subscriptions",
    {
      onRequest: [noStore, auth],
      schema: {
        summary: "Subscribe to a plan: charges the first month and returns a scoped API key (shown once)",
        response: replies(
          201,
          object({ ...subscriptionProperties, api_key: nullableString("The scoped key, shown only here") }),
        ),
        tags: ["subscriptions"],
        security,
        headers: {
          type: "object",
          properties: { "idempotency-key": { type: "string", minLength: 1, maxLength: 255 } },
        },
        // Only the plan: status, price, period and account come from the service, never the body.
        body: {
          type: "object",
          required: ["product_id"],
          additionalProperties: false,
          properties: { product_id: { type: "string", minLength: 1, maxLength: 64 } },
        },
      },
    },
    async (request, reply) => {
      const created = await deps.backends.billing.createSubscription(
        CreateSubscriptionRequest.fromPartial({
          accountId: principalOf(request).accountId,
          productId: request.body.product_id,
          idempotencyKey: request.headers["idempotency-key"] ?? "",
        }),
        { timeoutMs: 30_000 },
      );
      // A replay answers as the first call did; the header tells a client it was one.
      if (created.replayed) reply.header("idempotent-replayed", "true");
      return reply.code(201).send({ ...renderSubscription(created.subscription), api_key: created.apiKey || null });
    },
  );

  app.get(
    "/v1/subscriptions",
    {
      onRequest: auth,
      schema: {
        summary: "List your subscriptions",
        response: replies(200, listOf(object(subscriptionProperties))),
        tags: ["subscriptions"],
        security,
      },
    },
    async (request) => {
      const { subscriptions } = await deps.backends.billing.listSubscriptions(
        ListSubscriptionsRequest.fromPartial({ accountId: principalOf(request).accountId }),
      );
      return { object: "list", data: subscriptions.map(renderSubscription) };
    },
  );

  app.delete<{ Params: { subscription_id: string } }>(
    "/v1/subscriptions/:subscription_id",
    {
      onRequest: auth,
      schema: {
        summary: "Cancel a subscription (no refund); its scoped key stops working at once",
        response: replies(200, object(subscriptionProperties)),
        tags: ["subscriptions"],
        security,
        params: { type: "object", properties: { subscription_id: { type: "string", maxLength: 64 } } },
      },
    },
    async (request) => {
      const { subscription } = await deps.backends.billing.cancelSubscription(
        CancelSubscriptionRequest.fromPartial({
          accountId: principalOf(request).accountId,
          subscriptionId: request.params.subscription_id,
        }),
        { timeoutMs: 30_000 },
      );
      return renderSubscription(subscription);
    },
  );
}
