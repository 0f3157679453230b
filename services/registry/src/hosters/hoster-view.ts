import {
  EndpointFigures,
  Hoster,
  HosterModel,
  type EndpointStats,
  type Verification,
} from "@mkt/proto/registry/v1/registry";
import type { StoredHoster } from "./hoster-store.ts";

/** A model with no usage in the last day: zero counts, no uptime or percentiles. */
const NO_FIGURES: EndpointStats = {
  last30m: EndpointFigures.fromPartial({}),
  last1d: EndpointFigures.fromPartial({}),
  hours: [],
};

/** A model no verification run has reached (none yet, or it is on no open plan). */
const UNVERIFIED: Verification = { status: "unverified", lastRunAt: "", checks: [] };

/** What the views add to each model, keyed `hosterId/modelId`: live figures and verification. */
export interface EndpointFiguresByModel {
  stats?: ReadonlyMap<string, EndpointStats>;
  verdicts?: ReadonlyMap<string, Verification>;
}

/** A stored hoster as the API shows it (the token is not part of StoredHoster at all). */
export function hosterView(hoster: StoredHoster, figures: EndpointFiguresByModel = {}): Hoster {
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
        stats: figures.stats?.get(`${hoster.id}/${m.modelId}`) ?? NO_FIGURES,
        verification: figures.verdicts?.get(`${hoster.id}/${m.modelId}`) ?? UNVERIFIED,
      }),
    ),
    lastCheckedAt: hoster.lastCheckedAt?.toISOString() ?? "",
    consecutiveFailures: hoster.consecutiveFailures,
    usageMismatches: hoster.usageMismatches,
    createdAt: hoster.createdAt.toISOString(),
  });
}
