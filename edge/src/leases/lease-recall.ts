import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { LeaseRecall, LeaseRecallAck } from "@mkt/proto/billing/v1/leases";
import type { LeaseTable } from "./lease-table.ts";

/**
 * Answers billing's recalls on `subject` (`leases.recall.<edge_id>`, docs/architecture.md#revocation-stops-at-once): the named
 * lease or budget is dropped before the reply goes, so once billing has the ack no request is
 * admitted on it here, and the reply carries the final totals. A recall that cannot be read is
 * left unanswered: billing then waits out one TTL, which covers it. The same subject carries
 * billing's word that a newer process of this edge started (`superseded_below`). Returns the
 * unsubscribe.
 */
export function followLeaseRecalls(nc: NatsConnection, subject: string, table: LeaseTable, log: Logger): () => void {
  const subscription = nc.subscribe(subject, {
    callback: (err, msg) => {
      if (err) {
        log.warn({ err }, "leases.recall subscription failed");
        return;
      }
      let recall: LeaseRecall;
      try {
        recall = LeaseRecall.decode(msg.data);
      } catch (decodeErr) {
        log.warn({ err: decodeErr }, "unreadable leases.recall message");
        return;
      }
      // Word of a newer incarnation of this edge: published, not a request, so not answered.
      if (recall.supersededBelow > 0n) return table.supersededBy(recall.supersededBelow);
      const dropped = table.recall(recall.leaseId, recall.subscriptionId);
      const ack = LeaseRecallAck.fromPartial({
        edgeId: table.edgeId,
        known: dropped !== undefined,
        sequence: dropped?.sequence ?? table.nextSequence(),
        report: dropped?.report,
      });
      msg.respond(LeaseRecallAck.encode(ack).finish());
    },
  });
  return () => subscription.unsubscribe();
}
