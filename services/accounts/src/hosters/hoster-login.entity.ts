import { defineEntity, p } from "@mikro-orm/core";

/**
 * A hoster's portal login. The hoster record itself (server, models, plans) is registry's; this
 * is only the identity, keyed by the hoster id registry chose. Hosters are separate identities
 * from customer accounts, so one e-mail may have both.
 */
export const HosterLogin = defineEntity({
  name: "HosterLogin",
  tableName: "hoster_logins",
  properties: {
    hosterId: p.uuid().primary(),
    email: p.text(),
    emailNormalized: p.text().unique(),
    passwordHash: p.text(),
    createdAt: p.datetime(),
  },
});
