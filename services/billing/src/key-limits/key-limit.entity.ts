import { defineEntity, p } from "@mikro-orm/core";

/**
 * A key's spend limit (docs/adr/0020-key-spend-limits-in-billing.md): one row per key that has or
 * had one; `limitMicros` null means none, `limitReset` null a window that never resets. Mapped so
 * that the lease queries reading it with the account's leases are typed from it.
 */
export const KeyLimit = defineEntity({
  name: "KeyLimit",
  tableName: "key_limits",
  properties: {
    keyId: p.uuid().primary(),
    accountId: p.uuid(),
    limitMicros: p.bigint("bigint").nullable(),
    limitReset: p.text().nullable(), // daily | weekly | monthly
    updatedAt: p.datetime(),
  },
});
