import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { isDependencyOutage } from "@mkt/runtime/dependency-outage";
import { ensureUsageStream, type EventNames, type NatsConnection } from "@mkt/runtime/nats";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { endSpan, inBatchSpan, startConsumeSpan, type Span } from "@mkt/runtime/nats-trace";
import { decodeUsageEvent, usageItems } from "@mkt/runtime/usage-messages";
import type { BillingContext } from "../context.ts";
import { settleEvents } from "./settle-events.ts";
import { deadLetterEvents, refreshDeadLetterGauge } from "./dead-letter-events.ts";
import type { DeadLetter } from "@mkt/runtime/usage-dead-letters";
import { unrecordableReason } from "./usage-without-charge.ts";

/**
 * An event that failed to settle this many deliveries is dead-lettered (kept in
 * usage_dead_letters, its message acked) so it cannot block others; failures of an unavailable
 * database do not count.
 */
const MAX_ATTEMPTS = 10;
const RETRY_DELAY_MS = 5_000;
/** While the database is down, an event is tried again this soon: it settles soon after the database is back. */
const OUTAGE_RETRY_DELAY_MS = 1_000;
/** How long one pull waits for an event; also bounds how long stop() waits. */
const IDLE_WAIT_MS = 2_000;
/**
 * How long a message delivered and not acked waits before JetStream delivers it again. A billing
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

/** One message in hand: acked once each of its events is settled or dead-lettered, else nak'd. */
interface Message {
  msg: JsMsg;
  /** Set when one of its events must come again: the delay of its nak. */
  retryInMs?: number;
}

/** One event of a message, decoded. */
interface Item {
  message: Message;
  event: UsageCompleted;
  /** Its bytes as they came (what a dead letter keeps). */
  data: Uint8Array;
  /** The settlement's span in the chat request's trace, from the event's `traceparent`. */
  span: Span;
}

/**
 * Settles usage.completed messages from the durable pull consumer, each a batch of events from
 * one edge's publish (or one bare event from an edge that predates batches): up to
 * SETTLE_BATCH_SIZE messages at a time, their events settled in transactions of up to
 * SETTLE_BATCH_SIZE events, at most one pull per SETTLE_BATCH_WINDOW_MS. A message is acked once
 * each of its events is settled or dead-lettered (the letter committed); one event that must come
 * again makes its whole message come again, whose settled events are then duplicates.
 */
export async function startSettlementConsumer(
  ctx: BillingContext,
  nc: NatsConnection,
  names: EventNames,
): Promise<SettlementConsumer> {
  await ensureUsageStream(nc, names, { replicas: ctx.config.USAGE_STREAM_REPLICAS });
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
  await refreshDeadLetterGauge(ctx, log);

  /** Which message each dead letter came from (its message is acked only once the letter is written). */
  const letterMessages = new WeakMap<DeadLetter, Message>();

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
        // A full batch means a backlog (after an outage, a restart): the next one is waiting
        // already, so it is pulled at once rather than capping a settler at SETTLE_BATCH_SIZE
        // messages per window.
        const rest = batch.length >= ctx.config.SETTLE_BATCH_SIZE ? 0 : windowEnds - performance.now();
        if (rest > 0 && !stopped) await new Promise((resolve) => setTimeout(resolve, rest));
      } catch (err) {
        if (stopped) break;
        log.error({ err }, "settlement fetch failed; retrying");
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  })();

  async function settleBatch(batch: JsMsg[]): Promise<void> {
    const messages: Message[] = batch.map((msg) => ({ msg }));
    const letters: DeadLetter[] = [];
    const items: Item[] = [];
    for (const message of messages) read(message, items, letters);
    // Until each is acked or nak'd (a progress note after a nak would undo its delay).
    const stillWorking = setInterval(() => {
      for (const { msg } of messages) msg.working();
    }, ACK_WAIT_MS / 3);
    try {
      const size = ctx.config.SETTLE_BATCH_SIZE;
      for (let start = 0; start < items.length; start += size) {
        await settleItems(items.slice(start, start + size), letters);
      }
      await deadLetterEvents(ctx, letters, log).catch((err: unknown) => {
        // Not written: their messages come again (nothing is acked before its letters commit).
        log.error({ err, events: letters.length }, "usage dead letters not written; their messages come again");
        for (const letter of letters) letterMessages.get(letter)!.retryInMs = OUTAGE_RETRY_DELAY_MS;
      });
    } finally {
      clearInterval(stillWorking);
    }
    for (const message of messages) {
      if (message.retryInMs === undefined) message.msg.ack();
      else message.msg.nak(message.retryInMs);
    }
  }

  function deadLetter(message: Message, letter: Omit<DeadLetter, "subject" | "attempts">, letters: DeadLetter[]): void {
    const full = { ...letter, subject: message.msg.subject, attempts: message.msg.info.deliveryCount };
    letterMessages.set(full, message);
    letters.push(full);
  }

  /** A message's events: those that can settle as items, those that never can as dead letters. */
  function read(message: Message, items: Item[], letters: DeadLetter[]): void {
    const { msg } = message;
    let parts;
    try {
      parts = usageItems(msg.data, msg.headers);
    } catch (err) {
      // A batch that does not decode: its events cannot be told apart, so it is one letter.
      deadLetter(message, { data: msg.data, reason: `undecodable usage batch: ${(err as Error).message}` }, letters);
      return;
    }
    for (const part of parts) {
      let event: UsageCompleted;
      try {
        event = decodeUsageEvent(part.data);
      } catch (err) {
        deadLetter(message, { data: part.data, reason: `undecodable usage event: ${(err as Error).message}` }, letters);
        continue;
      }
      const unrecordable = unrecordableReason(event);
      if (unrecordable) {
        deadLetter(message, { data: part.data, reason: unrecordable, requestId: event.requestId }, letters);
        continue;
      }
      const headers = part.traceparent ? natsHeaders() : undefined;
      headers?.set("traceparent", part.traceparent);
      items.push({ message, event, data: part.data, span: startConsumeSpan(msg.subject, headers, "settle") });
    }
  }

  async function settleItems(items: Item[], letters: DeadLetter[]): Promise<void> {
    if (items.length === 0) return;
    try {
      await settleTogether(items);
      return;
    } catch (err) {
      // One bad event must not hold back the batch: settle each alone and retry only failures.
      log.warn({ err, events: items.length }, "batch settlement failed; settling events one by one");
    }
    for (const item of items) {
      try {
        await settleTogether([item]);
      } catch (itemErr) {
        const attempts = item.message.msg.info.deliveryCount;
        endSpan(item.span, itemErr);
        // A database outage is no fault of the event: it waits for the database however long
        // that takes (docs/adr/0027-dependency-outage-is-503.md).
        if (attempts >= MAX_ATTEMPTS && !isDependencyOutage(itemErr)) {
          log.error(
            { err: itemErr, requestId: item.event.requestId, attempts },
            "usage event failed to settle repeatedly; dead-lettering it",
          );
          const reason = `settlement failed ${attempts} times: ${(itemErr as Error).message}`;
          deadLetter(item.message, { data: item.data, reason, requestId: item.event.requestId }, letters);
          ctx.metrics.failed.inc({ result: "dead_lettered" });
        } else {
          log.warn(
            { err: itemErr, requestId: item.event.requestId, attempts },
            "usage event settlement failed; will retry",
          );
          const delay = isDependencyOutage(itemErr) ? OUTAGE_RETRY_DELAY_MS : RETRY_DELAY_MS;
          item.message.retryInMs = Math.min(item.message.retryInMs ?? delay, delay);
          ctx.metrics.failed.inc({ result: "retried" });
        }
      }
    }
  }

  async function settleTogether(items: Item[]): Promise<void> {
    // In a span of the first request's trace (nats-trace.ts), so its queries and log line are too.
    await inBatchSpan(
      "settle usage batch",
      items.map((item) => item.span),
      async () => {
        const outcomes = await settleEvents(
          ctx,
          items.map((item) => item.event),
          log,
          items.map((item) => item.message.msg.info.timestampNanos),
        );
        log.debug({ events: items.length, outcomes }, "usage settled");
      },
    );
    for (const { span } of items) endSpan(span);
  }

  return {
    async stop() {
      stopped = true;
      await loop;
    },
  };
}
