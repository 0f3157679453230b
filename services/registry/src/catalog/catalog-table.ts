import type { Logger } from "@mkt/runtime/logger";
import { SecretBoxError, type SecretBox } from "@mkt/runtime/secret-box";
import { CatalogTable, PlatformModel, RoutableHoster } from "@mkt/proto/registry/v1/registry";
import { hosterKeyContext } from "../hosters/hoster.entity.ts";
import type { HosterStore, RoutableHoster as StoredRoutableHoster } from "../hosters/hoster-store.ts";
import type { ProductStore } from "../products/product-store.ts";
import { productView } from "../products/product-view.ts";
import type { EndpointMinutesStore } from "../hosters/endpoint-minutes-store.ts";
import type { VerificationStore } from "../verification/verification-store.ts";
import { openModels } from "./open-routing.ts";
import type { ConfiguredModel } from "./configured-models.ts";
import { hosterUpstreamKey } from "./hoster-catalog.ts";
import {
  PLATFORM_MAX_OUTPUT_TOKENS,
  platformUpstream,
  type PlatformProvider,
  type PlatformServer,
} from "./platform-catalog.ts";

/** One provider's configured models and the operator's servers that serve them all. */
export interface PlatformOffer {
  provider: PlatformProvider;
  models: readonly ConfiguredModel[];
  servers: readonly PlatformServer[];
}

const unixSeconds = (at: Date) => BigInt(Math.floor(at.getTime() / 1000));

/**
 * The platform models of the table, in routing order (the offers' order, then each one's
 * configured order), with the operator's servers that serve them.
 */
export function platformTableModels(offers: readonly PlatformOffer[], createdAt: Date): PlatformModel[] {
  return offers.flatMap(({ provider, models, servers }) =>
    models.map((m) =>
      PlatformModel.fromPartial({
        modelId: m.modelId,
        modelAlias: m.modelAlias,
        provider,
        ownedBy: "platform",
        created: unixSeconds(createdAt),
        inputPricePer1mMicros: m.inputPricePer1mMicros,
        outputPricePer1mMicros: m.outputPricePer1mMicros,
        cachedInputPricePer1mMicros: m.cachedInputPricePer1mMicros,
        contextWindow: m.contextWindow,
        maxOutputTokensCap: PLATFORM_MAX_OUTPUT_TOKENS,
        maxN: m.maxN,
        kind: m.kind,
        upstreams: servers.map((server) => platformUpstream(provider, server, m)),
      }),
    ),
  );
}

export interface CatalogTableSources {
  platformModels: readonly PlatformModel[];
  hosters: Pick<HosterStore, "allRoutable">;
  products: Pick<ProductStore, "activeByHoster">;
  /** Live figures and verdicts: they decide which open endpoints are fallbacks only. */
  minutes: Pick<EndpointMinutesStore, "stats">;
  verification: Pick<VerificationStore, "verdicts">;
  clock: () => Date;
  /** Opens hosters' sealed tokens: the edge calls them with the plain token. */
  box: SecretBox;
  log: Logger;
}

/**
 * Builds the routing table (without its version) from configuration and the database: four
 * queries whatever the number of hosters (hosters with their models, every active plan, the
 * endpoints' figures and their verdicts).
 */
export async function buildCatalogTable(sources: CatalogTableSources): Promise<CatalogTable> {
  const [hosters, plans, stats, verdicts] = await Promise.all([
    sources.hosters.allRoutable(),
    sources.products.activeByHoster(),
    sources.minutes.stats(sources.clock()),
    sources.verification.verdicts(),
  ]);
  return CatalogTable.fromPartial({
    openModels: openModels({ hosters, plans, stats, verdicts }),
    platformModels: [...sources.platformModels],
    hosters: hosters.map((h) =>
      RoutableHoster.fromPartial({
        hosterId: h.id,
        name: h.name,
        status: h.status,
        created: unixSeconds(h.createdAt),
        models: h.models,
        endpointUrl: h.endpointUrl,
        token: openToken(h, sources),
        upstreamKey: hosterUpstreamKey(h.id),
        plans: (plans.get(h.id) ?? []).map(productView),
      }),
    ),
  });
}

/** The hoster's plain token, or '' (no usable server) when its sealed value does not open. */
function openToken(hoster: StoredRoutableHoster, { box, log }: CatalogTableSources): string {
  try {
    return box.open(hoster.apiKeySealed, hosterKeyContext(hoster.id));
  } catch (err) {
    if (!(err instanceof SecretBoxError)) throw err;
    log.error({ hosterId: hoster.id, reason: err.message }, "cannot open a hoster's stored token");
    return "";
  }
}
