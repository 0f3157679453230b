import { performance } from "node:perf_hooks";
import type { NatsConnection } from "@mkt/runtime/nats";
import { LeaseRecall, LeaseRecallAck } from "@mkt/proto/billing/v1/leases";
import type { BillingContext } from "../context.ts";
import type { AnnounceIncarnation, FencedLease, RecallLeases } from "./recall-types.ts";
import { applyRecallAck } from "./recall-ack.ts";

/** While an edge has no subscriber on its subject (reconnecting), how often to ask again. */
const NO_RESPONDER_RETRY_MS = 100;

export function recallSender(ctx: () => BillingContext, nc: NatsConnection, subjectOf: (edgeId: string) => string) {
  const recallLeases: RecallLeases = async (holders, subscriptionId, untilMs) => {
    const unique = [...new Map(holders.map((h) => [h.leaseId, h])).values()];
    await Promise.all(
      unique.map((holder) => recallOne(ctx(), nc, subjectOf(holder.edgeId), holder, subscriptionId, untilMs)),
    );
  };
  return recallLeases;
}

/** AnnounceIncarnation over NATS, on the edge's recall subject. */
export function incarnationAnnouncer(
  nc: NatsConnection,
  subjectOf: (edgeId: string) => string,
  log: BillingContext["log"],
): AnnounceIncarnation {
  return (edgeId, incarnation) => {
    try {
      nc.publish(
        subjectOf(edgeId),
        LeaseRecall.encode({ leaseId: "", subscriptionId: "", supersededBelow: incarnation }).finish(),
      );
    } catch (err) {
      // NATS away: the older process learns it from its next call, refused edge_superseded.
      log.warn({ err, edgeId }, "new edge incarnation not announced");
    }
  };
}

async function recallOne(
  ctx: BillingContext,
  nc: NatsConnection,
  subject: string,
  holder: FencedLease,
  subscriptionId: string,
  untilMs: number,
): Promise<void> {
  const data = LeaseRecall.encode({ leaseId: holder.leaseId, subscriptionId, supersededBelow: 0n }).finish();
  for (;;) {
    const left = Math.floor(untilMs - performance.now());
    if (left <= 0) {
      ctx.log.warn(
        { leaseId: holder.leaseId, edgeId: holder.edgeId },
        "lease recall not acked in time; the fence covers it",
      );
      ctx.metrics.leaseRecalls.inc({ result: "timed_out" });
      return;
    }
    let ack: LeaseRecallAck;
    try {
      const reply = await nc.request(subject, data, { timeout: left });
      ack = LeaseRecallAck.decode(reply.data);
    } catch {
      // No responder (the edge is reconnecting or gone) or a timeout: ask again while there is
      // time; a timeout has used it all, so the loop ends.
      await sleep(Math.min(NO_RESPONDER_RETRY_MS, Math.max(0, untilMs - performance.now())));
      continue;
    }
    if (ack.edgeId !== holder.edgeId) {
      ctx.log.warn(
        { leaseId: holder.leaseId, edgeId: holder.edgeId, from: ack.edgeId },
        "lease recall acked by another edge",
      );
      // Neither acked (the holder never answered) nor timed out: a misrouted reply, logged only.
      return;
    }
    ctx.metrics.leaseRecalls.inc({ result: "acked" });
    // The edge has dropped the lease or budget once it answered: the ack counts even if its
    // totals cannot be applied now (its next heartbeat carries them again).
    await applyRecallAck(ctx, holder, subscriptionId, ack).catch((err: unknown) => {
      ctx.log.warn({ err, leaseId: holder.leaseId }, "lease recall ack not applied");
    });
    return;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
