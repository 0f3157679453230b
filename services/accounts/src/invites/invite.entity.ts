import { defineEntity, p } from "@mikro-orm/core";

/** A single-use hoster invite code (only its SHA-256 is stored); consumed by one registration. */
export const Invite = defineEntity({
  name: "Invite",
  tableName: "invites",
  properties: {
    id: p.uuid().primary(),
    codeHash: p.text().unique(),
    createdAt: p.datetime(),
    consumedAt: p.datetime().nullable(),
    hosterId: p.uuid().nullable(),
  },
});
