import { Hoster, HosterModel } from "@mkt/proto/registry/v1/registry";
import type { StoredHoster } from "./hoster-store.ts";

/** A stored hoster as the API shows it (the token is not part of StoredHoster at all). */
export function hosterView(hoster: StoredHoster): Hoster {
  return Hoster.fromPartial({
    hosterId: hoster.id,
    name: hoster.name,
    endpointUrl: hoster.endpointUrl,
    status: hoster.status,
    models: hoster.models.map((m) =>
      HosterModel.fromPartial({
        modelId: m.modelId,
        modelAlias: m.modelAlias,
        contextWindow: m.contextWindow,
        kind: m.kind,
        maxN: m.maxN,
        canonicalId: m.canonicalId,
        quantization: m.quantization,
      }),
    ),
    lastCheckedAt: hoster.lastCheckedAt?.toISOString() ?? "",
    consecutiveFailures: hoster.consecutiveFailures,
    usageMismatches: hoster.usageMismatches,
    createdAt: hoster.createdAt.toISOString(),
  });
}
