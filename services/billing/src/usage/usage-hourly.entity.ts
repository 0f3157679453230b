import { defineEntity, p } from "@mikro-orm/core";

/**
 * Hourly usage aggregate per account, model, provider and subscription ('' for the account's own
 * keys), kept up to date by settlement.
 */
export const UsageHourly = defineEntity({
  name: "UsageHourly",
  tableName: "usage_hourly",
  properties: {
    accountId: p.uuid().primary(),
    hour: p.datetime().primary(),
    modelId: p.text().primary(),
    provider: p.text().primary(),
    subscriptionId: p.text().primary(),
    requests: p.bigint("bigint"),
    inputTokens: p.bigint("bigint"),
    /** The part of input_tokens read from the upstream's prompt cache. */
    cachedInputTokens: p.bigint("bigint"),
    outputTokens: p.bigint("bigint"),
    costMicros: p.bigint("bigint"),
    platformFeeMicros: p.bigint("bigint"),
    hosterEarnedMicros: p.bigint("bigint"),
    latencyMsSum: p.bigint("bigint"),
    failed: p.bigint("bigint"),
  },
});
