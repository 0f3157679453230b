import { defineEntity, p } from "@mikro-orm/core";

/** Where a hoster is in its life: not yet usable, or as its last health checks found it. */
export type HosterStatus = "registering" | "healthy" | "unhealthy";

/**
 * A hoster's inference server. `apiKeySealed` is the bearer token sealed by the SecretBox with the
 * context `hosterKeyContext(id)`; `lastError` is a generic description of the last failed check,
 * never a token or an upstream body.
 */
export const Hoster = defineEntity({
  name: "Hoster",
  tableName: "hosters",
  properties: {
    id: p.uuid().primary(),
    name: p.text(),
    endpointUrl: p.text(),
    apiKeySealed: p.text(),
    status: p.text().$type<HosterStatus>(),
    lastCheckedAt: p.datetime().nullable(),
    lastError: p.text().nullable(),
    consecutiveFailures: p.integer(),
    usageMismatches: p.bigint("bigint"),
    createdAt: p.datetime(),
  },
});

/** The SecretBox context of a hoster's token: a sealed token opens only on its own row. */
export const hosterKeyContext = (hosterId: string) => `hoster:${hosterId}:api_key`;
