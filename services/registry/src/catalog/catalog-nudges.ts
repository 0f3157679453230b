import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { CatalogChanged } from "@mkt/proto/events/v1/events";

/**
 * Follows `catalog.changed` from every replica (this one included): `changed(hosterId)` runs for
 * each announcement ('' when it names none or cannot be read), and once with '' after a
 * reconnect, since announcements published while this replica was cut off from NATS are lost.
 */
export function followCatalogNudges(
  nc: NatsConnection,
  subject: string,
  changed: (hosterId: string) => void,
  log: Logger,
): void {
  nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) return log.warn({ err }, "catalog.changed subscription failed");
      try {
        changed(CatalogChanged.decode(msg.data).hosterId);
      } catch {
        changed("");
      }
    },
  });
  void (async () => {
    for await (const status of nc.status()) if (status.type === "reconnect") changed("");
  })();
}
