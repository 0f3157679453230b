import { defineEntity, p } from "@mikro-orm/core";

/**
 * One period of a subscription: the tokens its settled requests used and the overage tokens
 * charged for. Keyed on the period index, so a renewal starts a new row with nothing to reset.
 */
export const SubscriptionUsage = defineEntity({
  name: "SubscriptionUsage",
  tableName: "subscription_usage",
  properties: {
    subscriptionId: p.uuid().primary(),
    periodIndex: p.integer().primary(),
    usedTokens: p.bigint("bigint"),
    overageTokens: p.bigint("bigint"),
  },
});

/** A subscriber's admitted requests and their worst-case tokens in one UTC calendar minute. */
export const SubscriptionRateCounter = defineEntity({
  name: "SubscriptionRateCounter",
  tableName: "subscription_rate_counters",
  properties: {
    subscriptionId: p.uuid().primary(),
    windowStart: p.datetime().primary(),
    requests: p.bigint("bigint"),
    tokens: p.bigint("bigint"),
  },
});
