// The types a recall passes around, on their own so that the billing context, which holds the
// recall sender, imports no lease code (and lease code may import the context).

/** A fenced lease and the edge that holds it, to be recalled. */
export interface FencedLease {
  leaseId: string;
  edgeId: string;
}

/**
 * Sends one recall per fenced lease to its edge and applies each ack, resolving when every holder
 * has acked or `untilMs` (on `performance.now`) has come. Never rejects: a missing ack is covered
 * by the wait, because a fenced lease or budget is never extended again and the edge's own
 * validity for it ends within one TTL of the fence (docs/architecture.md#revocation-stops-at-once).
 */
export type RecallLeases = (holders: FencedLease[], subscriptionId: string, untilMs: number) => Promise<void>;

/**
 * Tells every process under an edge's id that billing started incarnation `incarnation` of it
 * (published on its recall subject, no reply awaited): an older process still running drops its
 * leases at once instead of admitting on them until its next call is refused, up to a TTL later.
 */
export type AnnounceIncarnation = (edgeId: string, incarnation: bigint) => void;
