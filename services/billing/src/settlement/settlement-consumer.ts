import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { isDependencyOutage } from "@mkt/runtime/dependency-outage";
import { ensureUsageStream, type EventNames, type NatsConnection } from "@mkt/runtime/nats";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { endSpan, inBatchSpan, startConsumeSpan, type Span } from "@mkt/runtime/nats-trace";
import type { BillingContext } from "../context.ts";
import { settleEvents } from "./settle-events.ts";

/**
 * An event that failed to settle this many times is dropped (logged) so it cannot block others;
 * failures of an unavailable database do not count.
 */
const MAX_ATTEMPTS = 10;
const RETRY_DELAY_MS = 5_000;
/** While the database is down, an event is tried again this soon: it settles soon after the database is back. */
const OUTAGE_RETRY_DELAY_MS = 1_000;
/** How long one pull waits for an event; also bounds how long stop() waits. */
const IDLE_WAIT_MS = 2_000;
/**
 * How long an event delivered and not acked waits before JetStream delivers it again. A billing
 * replica killed with a batch in hand leaves that batch unacked: its events settle this long after
 * the kill (on the restarted replica or another), so it is short. A live replica whose batch takes
 * longer (a slow or unavailable database) tells JetStream it is still working every third of it.
 */
const ACK_WAIT_MS = 5_000;
const ACK_WAIT_NS = ACK_WAIT_MS * 1_000_000;

export interface SettlementConsumer {
  /** Stops fetching and waits for the batch being settled. */
  stop(): Promise<void>;
}

interface Decoded {
  msg: JsMsg;
  event: UsageCompleted;
  /** The settlement's span in the chat request's trace, from the message's `traceparent`. */
  span: Span;
}

/**
 * Settles usage.completed events from the durable pull consumer: batches of up to
 * SETTLE_BATCH_SIZE, one transaction per batch, acknowledged only after the commit, at most one
 * batch per SETTLE_BATCH_WINDOW_MS.
 */
export async function startSettlementConsumer(
  ctx: BillingContext,
  nc: NatsConnection,
  names: EventNames,
): Promise<SettlementConsumer> {
  await ensureUsageStream(nc, names);
  const jsm = await jetstreamManager(nc);
  const config = {
    durable_name: names.settlerConsumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: names.usageCompleted,
    ack_wait: ACK_WAIT_NS,
  };
  try {
    await jsm.consumers.info(names.usageStream, names.settlerConsumer);
    await jsm.consumers.update(names.usageStream, names.settlerConsumer, {
      ack_wait: ACK_WAIT_NS,
      filter_subject: names.usageCompleted,
    });
  } catch {
    await jsm.consumers.add(names.usageStream, config);
  }
  const consumer = await jetstream(nc).consumers.get(names.usageStream, names.settlerConsumer);
  const log = ctx.log.child({ component: "settler" });

  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      try {
        // Wait for one event, then take what is already queued behind it: a lone event settles
        // at once, and a backlog settles in batches of up to SETTLE_BATCH_SIZE.
        const first = await consumer.next({ expires: IDLE_WAIT_MS });
        if (!first) continue;
        const windowEnds = performance.now() + ctx.config.SETTLE_BATCH_WINDOW_MS;
        const batch: JsMsg[] = [first];
        const queued = Math.min(first.info.pending, ctx.config.SETTLE_BATCH_SIZE - 1);
        if (queued > 0) {
          const messages = await consumer.fetch({ max_messages: queued, expires: 1_000 });
          for await (const msg of messages) batch.push(msg);
        }
        await settleBatch(batch);
        // Each batch costs a handful of round trips to PostgreSQL whatever its size: pulling again only
        // when the window is over lets the events that arrive meanwhile share the next one. At
        // 600 requests/s this cut billing's and PostgreSQL's CPU per request by a third
        // (bench/README.md).
        const rest = windowEnds - performance.now();
        if (rest > 0 && !stopped) await new Promise((resolve) => setTimeout(resolve, rest));
      } catch (err) {
        if (stopped) break;
        log.error({ err }, "settlement fetch failed; retrying");
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  })();

  async function settleBatch(batch: JsMsg[]): Promise<void> {
    const decoded: Decoded[] = [];
    for (const msg of batch) {
      const event = decode(msg);
      if (event) decoded.push({ msg, event, span: startConsumeSpan(msg.subject, msg.headers, "settle") });
    }
    if (decoded.length === 0) return;
    // Until each is acked, nak'd or terminated (a progress note after a nak would undo its delay).
    const unanswered = new Set(decoded.map((item) => item.msg));
    const stillWorking = setInterval(() => {
      for (const msg of unanswered) msg.working();
    }, ACK_WAIT_MS / 3);
    try {
      await settleBatchItems(decoded, unanswered);
    } finally {
      clearInterval(stillWorking);
    }
  }

  async function settleBatchItems(decoded: Decoded[], unanswered: Set<JsMsg>): Promise<void> {
    try {
      await settleTogether(decoded, unanswered);
    } catch (err) {
      // One bad event must not hold back the batch: settle each alone and retry only failures.
      log.warn({ err, events: decoded.length }, "batch settlement failed; settling events one by one");
      for (const item of decoded) {
        try {
          await settleTogether([item], unanswered);
        } catch (itemErr) {
          const attempts = item.msg.info.deliveryCount;
          // A database outage is no fault of the event: it waits for the database however long
          // that takes, where dropping it would lose the usage
          // (docs/adr/0027-dependency-outage-is-503.md).
          if (attempts >= MAX_ATTEMPTS && !isDependencyOutage(itemErr)) {
            log.error(
              { err: itemErr, requestId: item.event.requestId, attempts },
              "usage event dropped after repeated failures",
            );
            item.msg.term();
            unanswered.delete(item.msg);
            ctx.metrics.failed.inc({ result: "dropped" });
            endSpan(item.span, itemErr);
          } else {
            log.warn(
              { err: itemErr, requestId: item.event.requestId, attempts },
              "usage event settlement failed; will retry",
            );
            item.msg.nak(isDependencyOutage(itemErr) ? OUTAGE_RETRY_DELAY_MS : RETRY_DELAY_MS);
            unanswered.delete(item.msg);
            ctx.metrics.failed.inc({ result: "retried" });
            endSpan(item.span, itemErr);
          }
        }
      }
    }
  }

  async function settleTogether(items: Decoded[], unanswered: Set<JsMsg>): Promise<void> {
    // In a span of the first request's trace (nats-trace.ts), so its queries and log line are too.
    await inBatchSpan(
      "settle usage batch",
      items.map((item) => item.span),
      async () => {
        const outcomes = await settleEvents(
          ctx,
          items.map((item) => item.event),
          log,
          items.map((item) => item.msg.info.timestampNanos),
        );
        for (const { msg } of items) {
          msg.ack();
          unanswered.delete(msg);
        }
        log.debug({ events: items.length, outcomes }, "usage settled");
      },
    );
    for (const { span } of items) endSpan(span);
  }

  function decode(msg: JsMsg): UsageCompleted | undefined {
    try {
      const event = UsageCompleted.decode(msg.data);
      if (!event.requestId) throw new Error("request_id is empty");
      return event;
    } catch (err) {
      // A poison message can never settle; terminate it so redelivery does not block the stream.
      log.error({ err, seq: msg.info.streamSequence }, "undecodable usage event terminated");
      // No reason string: NATS servers before 2.10 ignore "+TERM <reason>" and would redeliver.
      msg.term();
      return undefined;
    }
  }

  return {
    async stop() {
      stopped = true;
      await loop;
    },
  };
}
