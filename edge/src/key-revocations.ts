import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { KeyRevoked, KeyRevokedAck } from "@mkt/proto/events/v1/events";
import { followInvalidations } from "./cache-invalidations.ts";
import type { PrincipalCache } from "./principal-cache.ts";

/**
 * Keeps the principal cache honest: drops a key on `keys.revoked` and acks it with this edge's id
 * (everything when the message cannot be read: we cannot tell which key it meant; no ack), and tells it when NATS goes down (it then
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
    {
      apply: (data) => {
        cache.revoke(KeyRevoked.decode(data).keyId);
        // Dropped before the ack goes: once accounts has it, this edge admits nothing on the key.
        return KeyRevokedAck.encode({ edgeId: cache.edgeId }).finish();
      },
      applyUnreadable: () => cache.clear(),
    },
    log,
  );
}
