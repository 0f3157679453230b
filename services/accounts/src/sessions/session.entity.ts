import { defineEntity, p } from "@mikro-orm/core";

/** A login session (the cookie holds the token; only its SHA-256 is stored). */
export const Session = defineEntity({
  name: "Session",
  tableName: "sessions",
  properties: {
    id: p.uuid().primary(),
    tokenHash: p.text().unique(),
    kind: p.text(),
    subjectId: p.uuid(),
    email: p.text(),
    createdAt: p.datetime(),
    expiresAt: p.datetime(),
    endedAt: p.datetime().nullable(),
  },
});
