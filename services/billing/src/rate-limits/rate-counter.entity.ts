import { defineEntity, p } from "@mikro-orm/core";

/** Requests admitted for an account in one UTC calendar minute or day. */
export const RateCounter = defineEntity({
  name: "RateCounter",
  tableName: "rate_counters",
  properties: {
    accountId: p.uuid().primary(),
    window: p.text().primary(),
    windowStart: p.datetime().primary(),
    count: p.bigint("bigint"),
  },
});
