import { defineEntity, p } from "@mikro-orm/core";

/**
 * Attempts of one kind (sign-up, failed invite code, failed login) from one client IP in one UTC
 * hour. Per-IP counters live in the database, so every replica shares them.
 */
export const IpAttempt = defineEntity({
  name: "IpAttempt",
  tableName: "ip_attempts",
  properties: {
    purpose: p.text().primary(),
    clientIp: p.text().primary(),
    windowStart: p.datetime().primary(),
    attempts: p.integer(),
  },
});
