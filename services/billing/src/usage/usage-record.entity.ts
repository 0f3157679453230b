import { defineEntity, p } from "@mikro-orm/core";

/** The settled outcome of one chat request, keyed on its request id. */
export const UsageRecord = defineEntity({
  name: "UsageRecord",
  tableName: "usage_records",
  properties: {
    requestId: p.text().primary(),
    accountId: p.uuid(),
    keyId: p.text(),
    modelId: p.text(),
    provider: p.text(),
    hosterId: p.text(),
    /** '' for the account's own keys. */
    subscriptionId: p.text(),
    inputTokens: p.bigint("bigint"),
    outputTokens: p.bigint("bigint"),
    costMicros: p.bigint("bigint"),
    platformFeeMicros: p.bigint("bigint"),
    hosterEarnedMicros: p.bigint("bigint"),
    latencyMs: p.bigint("bigint"),
    /** Null when no token reached the caller (or the record predates the column). */
    timeToFirstTokenMs: p.bigint("bigint").nullable(),
    /** The answer's finish_reason, `error`, or '' (usage.completed's `finish_reason`). */
    finishReason: p.text(),
    success: p.boolean(),
    errorCode: p.text(),
    createdAt: p.datetime(),
  },
});
