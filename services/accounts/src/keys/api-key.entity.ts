import { defineEntity, p } from "@mikro-orm/core";

/**
 * An API key. Only the SHA-256 of the secret is stored; `prefix` is its non-secret start, for
 * lists. The subscription columns are set only on a subscription's scoped key, the session
 * columns only on a session key (the portal's playground).
 */
export const ApiKey = defineEntity({
  name: "ApiKey",
  tableName: "api_keys",
  properties: {
    id: p.uuid().primary(),
    accountId: p.uuid(),
    name: p.text(),
    prefix: p.text(),
    keyHash: p.text(),
    createdAt: p.datetime(),
    revokedAt: p.datetime().nullable(),
    subscriptionId: p.text().nullable(),
    productId: p.text().nullable(),
    hosterId: p.text().nullable(),
    sessionId: p.uuid().nullable(),
    expiresAt: p.datetime().nullable(),
  },
});
