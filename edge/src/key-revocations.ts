import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import type { PrincipalCache } from "./principal-cache.ts";

/**
 * Keeps the principal cache honest: drops a key on `keys.revoked`, and flushes everything (and
 * caches nothing) while the NATS connection is down, since revocations sent meanwhile are lost.
 * Returns a function that stops listening.
 */
export function followKeyRevocations(
  nc: NatsConnection,
  subject: string,
  cache: PrincipalCache,
  log: Logger,
): () => void {
  const subscription = nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) {
        log.warn({ err }, "keys.revoked subscription failed");
        cache.setEnabled(false);
        return;
      }
      try {
        cache.revoke(KeyRevoked.decode(msg.data).keyId);
      } catch (decodeErr) {
        // Unreadable: we cannot tell which key it meant, so trust nothing cached.
        log.warn({ err: decodeErr }, "unreadable keys.revoked message; flushing the principal cache");
        cache.clear();
      }
    },
  });
  cache.setEnabled(!nc.isClosed());
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") cache.setEnabled(false);
      // The subscription is restored before "reconnect" is reported; flush what was cached before.
      if (status.type === "reconnect") cache.setEnabled(true);
    }
  })();
  return () => {
    subscription.unsubscribe();
    cache.setEnabled(false);
  };
}
