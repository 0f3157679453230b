import { defineEntity, p } from "@mikro-orm/core";

/**
 * The settled outcome of one chat request, keyed on its request id and its time (the table is
 * partitioned by month on created_at: docs/adr/0045-usage-records-append.md).
 */
export const UsageRecord = defineEntity({
  name: "UsageRecord",
  tableName: "usage_records",
  properties: {
    requestId: p.uuid().primary(),
    accountId: p.uuid(),
    keyId: p.text(),
    modelId: p.text(),
    provider: p.text(),
    hosterId: p.text(),
    /** '' for the account's own keys. */
    subscriptionId: p.text(),
    inputTokens: p.bigint("bigint"),
    outputTokens: p.bigint("bigint"),
    /** Of inputTokens, those the upstream served from its prompt cache (priced at the cached price). */
    cachedInputTokens: p.bigint("bigint"),
    /** Of outputTokens, those the model spent reasoning (priced as output). */
    reasoningTokens: p.bigint("bigint"),
    costMicros: p.bigint("bigint"),
    platformFeeMicros: p.bigint("bigint"),
    hosterEarnedMicros: p.bigint("bigint"),
    /** Of costMicros, what the platform absorbed because the customer could no longer pay it. */
    writeOffMicros: p.bigint("bigint"),
    /** The settled batch's `usage_batch` journal entry; null when it was charged nothing. */
    entryId: p.uuid().nullable(),
    latencyMs: p.bigint("bigint"),
    /** Null when no token reached the caller (or the record predates the column). */
    timeToFirstTokenMs: p.bigint("bigint").nullable(),
    /** The answer's finish_reason, `error`, or '' (usage.completed's `finish_reason`). */
    finishReason: p.text(),
    success: p.boolean(),
    errorCode: p.text(),
    createdAt: p.datetime().primary(),
  },
});
