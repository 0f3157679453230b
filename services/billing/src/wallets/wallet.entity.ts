import { defineEntity, p } from "@mikro-orm/core";

/**
 * A customer's wallet. `postedMicros` always equals the sum of the customer's ledger postings
 * (kept in the row, updated in the same transaction); `heldMicros` is the sum of open holds.
 */
export const Wallet = defineEntity({
  name: "Wallet",
  tableName: "wallets",
  properties: {
    accountId: p.uuid().primary(),
    postedMicros: p.bigint("bigint"),
    heldMicros: p.bigint("bigint"),
    createdAt: p.datetime(),
  },
});
