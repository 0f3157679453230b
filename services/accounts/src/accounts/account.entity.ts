import { defineEntity, p } from "@mikro-orm/core";

/**
 * A customer account. `email` keeps the address as the user typed it (trimmed), for display;
 * `emailNormalized` (lowercase) is what uniqueness and login compare.
 */
export const Account = defineEntity({
  name: "Account",
  tableName: "accounts",
  properties: {
    id: p.uuid().primary(),
    email: p.text(),
    emailNormalized: p.text(),
    passwordHash: p.text(),
    tier: p.text(),
    createdAt: p.datetime(),
  },
});
