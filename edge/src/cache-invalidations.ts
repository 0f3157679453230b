import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";

/** A cache that NATS messages keep honest. */
export interface InvalidatedCache {
  /**
   * Off: the feed is down, so messages are being lost; each cache decides what it still trusts
   * (the principal cache its entries for one more TTL). On: the feed is
   * back (after a reconnect), and what was cached before is forgotten.
   */
  setEnabled(enabled: boolean): void;
}

/**
 * Keeps a cache honest from a NATS subject: each message is applied (`apply` decodes it and drops
 * what it names; a message that cannot be read calls `applyUnreadable`, which must trust nothing
 * cached), and while the connection is down the cache is told so (off), since messages sent
 * meanwhile are lost. The principal cache follows keys.revoked this way. Returns a function that stops following and turns the cache off.
 */
export function followInvalidations(
  nc: NatsConnection,
  subject: string,
  cache: InvalidatedCache,
  /** `apply` may return an answer, sent when the message was published with a reply subject. */
  handlers: { apply(data: Uint8Array): Uint8Array | void; applyUnreadable(): void },
  log: Logger,
): () => void {
  const subscription = nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) {
        log.warn({ err, subject }, "invalidation subscription failed");
        cache.setEnabled(false);
        return;
      }
      try {
        const answer = handlers.apply(msg.data);
        if (answer && msg.reply) msg.respond(answer);
      } catch (decodeErr) {
        log.warn({ err: decodeErr, subject }, "unreadable invalidation message; trusting nothing cached");
        handlers.applyUnreadable();
      }
    },
  });
  cache.setEnabled(!nc.isClosed());
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") cache.setEnabled(false);
      // The subscription is restored before "reconnect" is reported; what was cached before is gone.
      if (status.type === "reconnect") cache.setEnabled(true);
    }
  })();
  return () => {
    subscription.unsubscribe();
    cache.setEnabled(false);
  };
}
