import { defineEntity, p } from "@mikro-orm/core";

/** A model a hoster's server serves, as registered; unique per hoster. */
export const HosterModel = defineEntity({
  name: "HosterModel",
  tableName: "hoster_models",
  properties: {
    hosterId: p.uuid().primary(),
    modelId: p.text().primary(),
    modelAlias: p.text(),
    contextWindow: p.bigint("bigint"),
    /** chat | embedding */
    kind: p.text(),
    /** The most choices (`n`) one chat request may ask for. */
    maxN: p.integer(),
    /** The model's public name, shared by every hoster serving it (model_id unless given). */
    canonicalId: p.text(),
    /** How its weights are stored (bf16, int4, q4_k_m, ...), `unknown` unless given. */
    quantization: p.text(),
    /** The last verification's verdict: unverified | verified | degraded (docs/verification.md). */
    verificationStatus: p.text(),
    /** Failed verification runs in a row. */
    verificationFailures: p.integer(),
    verificationRanAt: p.datetime().nullable(),
    /** The last run's checks, as the endpoints list shows them. */
    verificationChecks: p.json(),
  },
});
