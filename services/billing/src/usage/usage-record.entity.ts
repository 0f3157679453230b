import { defineEntity, p } from "@mikro-orm/core";

/** The settled outcome of one chat request, keyed on its request id. */
export const UsageRecord = defineEntity({
  name: "UsageRecord",
  tableName: "usage_records",
  properties: {
    requestId: p.text().primary(),
    reservationId: p.uuid().nullable(),
    accountId: p.uuid(),
    keyId: p.text(),
    modelId: p.text(),
    provider: p.text(),
    hosterId: p.text(),
    inputTokens: p.bigint("bigint"),
    outputTokens: p.bigint("bigint"),
    costMicros: p.bigint("bigint"),
    platformFeeMicros: p.bigint("bigint"),
    hosterEarnedMicros: p.bigint("bigint"),
    latencyMs: p.bigint("bigint"),
    success: p.boolean(),
    errorCode: p.text(),
    createdAt: p.datetime(),
  },
});
