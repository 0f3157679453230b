import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { CatalogChanged } from "@mkt/proto/events/v1/events";

/** Tells the edges (and registry's replicas) that routes of `hosterId` ('' for any) may have changed. */
export type AnnounceCatalogChange = (hosterId: string) => void;

/**
 * Publishes `catalog.changed` on NATS core, called after the change is committed so a listener
 * that re-resolves at once reads the new state. Fire and forget: a lost announcement only leaves
 * a route cached until its TTL, and an edge that was disconnected caches nothing meanwhile, so a
 * failure to publish never fails the change that caused it.
 */
export function catalogAnnouncer(nc: NatsConnection, subject: string, log: Logger): AnnounceCatalogChange {
  return (hosterId) => {
    try {
      nc.publish(subject, CatalogChanged.encode({ hosterId }).finish());
    } catch (err) {
      log.warn({ err, hosterId }, "could not announce a catalog change");
    }
  };
}
