import { isUuid } from "@mkt/runtime/ids";
import type { Logger } from "@mkt/runtime/logger";
import type { HosterStore, RoutableHoster } from "../hosters/hoster-store.ts";
import { isScoped, type CatalogModel, type ModelCatalog } from "./model-catalog.ts";

export interface HosterCatalogOptions {
  store: Pick<HosterStore, "routable">;
  /**
   * How long a hoster row read from the database is reused for ListModels. A change written by
   * another replica must show within a probe interval, so this is at most HOSTER_PROBE_INTERVAL_MS.
   */
  cacheTtlMs: number;
  log: Logger;
  /** Milliseconds; tests may set it. */
  now?: () => number;
}

/** A hoster's outlier key at the edges: its id, so registry's probe can clear it whatever its URL. */
export const hosterUpstreamKey = (hosterId: string) => `hoster ${hosterId.toLowerCase()}`;

interface CacheEntry {
  expiresAt: number;
  hoster: Promise<RoutableHoster | undefined>;
}

/**
 * The models of subscription hosters, for scoped keys only: a scope sees exactly its own
 * hoster's registered models, and a normal key sees none.
 */
export function hosterCatalog(options: HosterCatalogOptions): ModelCatalog & { forget(hosterId: string): void } {
  const now = options.now ?? Date.now;
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

  function catalogModels(h: RoutableHoster): CatalogModel[] {
    const created = BigInt(Math.floor(h.createdAt.getTime() / 1000));
    return h.models.map((m) => ({
      modelId: m.modelId,
      modelAlias: m.modelAlias,
      provider: "hoster",
      ownedBy: h.name,
      created,
      contextWindow: m.contextWindow,
      kind: m.kind,
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
      return found ? catalogModels(found) : [];
    },
  };
}
