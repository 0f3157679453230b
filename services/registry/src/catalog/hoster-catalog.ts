import { isUuid } from "@mkt/runtime/ids";
import type { Logger } from "@mkt/runtime/logger";
import { SecretBoxError, type SecretBox } from "@mkt/runtime/secret-box";
import { Route, type RouteScope } from "@mkt/proto/registry/v1/registry";
import { hosterKeyContext } from "../hosters/hoster.entity.ts";
import type { HosterStore, RoutableHoster } from "../hosters/hoster-store.ts";
import {
  isScoped,
  type CatalogModel,
  type EjectionView,
  type ModelCatalog,
  type UpstreamTarget,
} from "./model-catalog.ts";

export interface HosterCatalogOptions {
  store: Pick<HosterStore, "routable">;
  box: SecretBox;
  /**
   * How long a hoster row read from the database is reused. Routing is on the hot path, but a
   * status change written by a probe (this replica's or another's) must reach routing within a
   * probe interval, so this is at most HOSTER_PROBE_INTERVAL_MS.
   */
  cacheTtlMs: number;
  log: Logger;
  /** Live failures eject a hoster (its models answer no_healthy_upstream) until a probe succeeds. */
  outliers?: EjectionView;
  /** Milliseconds; tests may set it. */
  now?: () => number;
}

/** A hoster's outlier key: its id, so its health probe can clear it whatever its URL. */
export const hosterUpstreamKey = (hosterId: string) => `hoster ${hosterId.toLowerCase()}`;

interface CacheEntry {
  expiresAt: number;
  hoster: Promise<RoutableHoster | undefined>;
}

/**
 * The models of subscription hosters, for scoped keys only: a scope sees exactly its own
 * hoster's registered models, and a normal key sees none. Routes are priced at 0 because a
 * subscription request is priced by billing from the subscription's terms snapshot (the plan
 * the customer bought), not from the route; the output cap is the model's context window, which
 * billing narrows further with the plan's limits.
 */
export function hosterCatalog(options: HosterCatalogOptions): ModelCatalog & { forget(hosterId: string): void } {
  const now = options.now ?? Date.now;
  const outliers = options.outliers ?? { isEjected: () => false };
  const cache = new Map<string, CacheEntry>();

  /** The hoster's row, at most cacheTtlMs old; concurrent misses share one read. */
  function hoster(hosterId: string): Promise<RoutableHoster | undefined> {
    // Ids arrive from other services as strings; a malformed one must never reach a uuid column.
    if (!isUuid(hosterId)) return Promise.resolve(undefined);
    const id = hosterId.toLowerCase();
    const at = now();
    const cached = cache.get(id);
    if (cached && cached.expiresAt > at) return cached.hoster;
    if (cache.size >= 1_000) {
      for (const [key, entry] of cache) if (entry.expiresAt <= at) cache.delete(key);
    }
    const read = options.store.routable(id);
    const entry: CacheEntry = { expiresAt: at + options.cacheTtlMs, hoster: read };
    cache.set(id, entry);
    // A failed read is not remembered: the next call tries the database again.
    read.catch(() => {
      if (cache.get(id) === entry) cache.delete(id);
    });
    return read;
  }

  function catalogModels(h: RoutableHoster, scope: RouteScope): CatalogModel[] {
    const created = BigInt(Math.floor(h.createdAt.getTime() / 1000));
    return h.models.map((m) => ({
      modelId: m.modelId,
      modelAlias: m.modelAlias,
      ownedBy: h.name,
      created,
      healthy: h.status === "healthy" && !outliers.isEjected(hosterUpstreamKey(h.id)),
      route: Route.fromPartial({
        modelId: m.modelId,
        provider: "hoster",
        hosterId: h.id,
        productId: scope.productId,
        inputPricePer1mMicros: 0n,
        outputPricePer1mMicros: 0n,
        contextWindow: m.contextWindow,
        maxOutputTokensCap: m.contextWindow,
      }),
    }));
  }

  return {
    /** Drops a hoster's cached row ('' for all), on catalog.changed from any replica. */
    forget(hosterId: string) {
      if (hosterId === "") cache.clear();
      else cache.delete(hosterId.toLowerCase());
    },

    async models(scope) {
      if (!scope || !isScoped(scope) || scope.hosterId === "") return [];
      const found = await hoster(scope.hosterId);
      return found ? catalogModels(found, scope) : [];
    },

    // One server per hoster, so a hoster route has no failover; an ejected one is still returned
    // (the relay answers no_healthy_upstream for it).
    async candidatesFor(route): Promise<UpstreamTarget[]> {
      if (route.provider !== "hoster") return [];
      const found = await hoster(route.hosterId);
      // Checked again here: a route may have been resolved (or cached by the edge) before a probe
      // marked the hoster unhealthy.
      if (!found || found.status !== "healthy") return [];
      const model = found.models.find((m) => m.modelId === route.modelId);
      if (!model) return [];
      let token: string;
      try {
        // Opened per call, so the plain token is not kept in the cache.
        token = options.box.open(found.apiKeySealed, hosterKeyContext(found.id));
      } catch (err) {
        if (!(err instanceof SecretBoxError)) throw err;
        options.log.error({ hosterId: found.id, reason: err.message }, "cannot open a hoster's stored token");
        return [];
      }
      const key = hosterUpstreamKey(found.id);
      return [{ baseUrl: found.endpointUrl, token, upstreamModel: model.modelId, trust: "hoster", key }];
    },
  };
}
