import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { CatalogChanged } from "@mkt/proto/events/v1/events";

/** Tells the edges (and registry's replicas) that routes of `hosterId` ('' for any) may have changed. */
export type AnnounceCatalogChange = (hosterId: string) => void;

/**
 * Publishes `catalog.changed` on NATS core, called after the change is committed so a replica
 * that rebuilds its routing table at once reads the new state. Fire and forget: a lost
 * announcement only delays the change on the other replicas' edges until their resync (30 s), so
 * a failure to publish never fails the change that caused it.
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
