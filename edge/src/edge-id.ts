import { randomUUID } from "node:crypto";

/**
 * One edge process's identity: billing knows its leases by it (leases.recall.<edge_id>), accounts
 * the keys it caches (a revocation waits for its ack). A fresh one per process start.
 */
export function newEdgeId(): string {
  return `edge_${randomUUID()}`;
}
