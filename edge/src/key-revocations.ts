import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import { followInvalidations } from "./cache-invalidations.ts";
import type { PrincipalCache } from "./principal-cache.ts";

/**
 * Keeps the principal cache honest: drops a key on `keys.revoked` (everything when the message
 * cannot be read: we cannot tell which key it meant), and tells it when NATS goes down (it then
 * serves from memory for one TTL at most) and comes back (it starts empty).
 */
export function followKeyRevocations(
  nc: NatsConnection,
  subject: string,
  cache: PrincipalCache,
  log: Logger,
): () => void {
  return followInvalidations(
    nc,
    subject,
    cache,
    { apply: (data) => cache.revoke(KeyRevoked.decode(data).keyId), applyUnreadable: () => cache.clear() },
    log,
  );
}
