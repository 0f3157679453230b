import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { CatalogChanged } from "@mkt/proto/events/v1/events";
import { followInvalidations } from "./cache-invalidations.ts";
import type { RouteCache } from "./chat/route-cache.ts";

/**
 * Keeps the route cache honest: drops a hoster's routes on `catalog.changed` (all of them when it
 * names none, or when the message cannot be read), and caches nothing while NATS is down.
 */
export function followCatalogChanges(nc: NatsConnection, subject: string, cache: RouteCache, log: Logger): () => void {
  return followInvalidations(
    nc,
    subject,
    cache,
    { apply: (data) => cache.drop(CatalogChanged.decode(data).hosterId), applyUnreadable: () => cache.drop("") },
    log,
  );
}
