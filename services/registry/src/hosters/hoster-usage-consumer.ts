import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { isDependencyOutage } from "@mkt/runtime/dependency-outage";
import type { Orm } from "@mkt/runtime/db";
import type { Logger } from "@mkt/runtime/logger";
import { setTimeout as sleep } from "node:timers/promises";
import type { EventNames, NatsConnection } from "@mkt/runtime/nats";
import { waitForUsageStream } from "@mkt/runtime/nats";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { DeadLetter } from "@mkt/runtime/usage-dead-letters";
import { decodeUsageEvent, usageItems } from "@mkt/runtime/usage-messages";
import type { Counter } from "prom-client";
import type { EndpointMinutesStore } from "./endpoint-minutes-store.ts";
import { writeUsageFigures, type UsageFigureStores } from "./usage-figures.ts";

/** Messages taken per batch: one statement writes the whole batch's figures. */
const BATCH_SIZE = 500;
/**
 * A message whose figures failed to be written this many deliveries has its events dead-lettered
 * (registry's usage_dead_letters) and is acked; failures of an unavailable database do not count.
 */
const MAX_ATTEMPTS = 10;
/** A message whose write failed comes again this much later. */
const RETRY_DELAY_MS = 1_000;
/** How long one pull waits for an event; also bounds how long stop() waits. */
const IDLE_WAIT_MS = 2_000;
/** A batch not acked this long (a replica killed with it in hand) is delivered again. */
const ACK_WAIT_NS = 30_000 * 1_000_000;
/** How often a replica removes endpoint minutes older than a day. */
const PRUNE_EVERY_MS = 10 * 60_000;

export interface HosterUsageConsumer {
  /**
   * Settles once the durable consumer exists (the stream billing creates was found): events
   * published from then on are counted. Rejects only when stopped first.
   */
  ready: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Keeps each hoster's figures from the edges' usage.completed events (its usage reports that
 * disagreed with the edge's count, and each of its models' live figures by the minute): one durable
 * pull consumer shared by registry's replicas (each event reaches one of them), batches written
 * with two set-based statements in one transaction and acked after it. A batch whose write failed is not acked and
 * comes again (its two tables are written in one transaction, so a failed write counted
 * nothing); a replica killed after the commit but before the ack counts that batch twice, which
 * the figure (a warning sign, not a ledger) tolerates. Events billing took through RecordUsage
 * while JetStream was down never reach the stream, so they are missing here.
 *
 * Billing owns the usage stream (its settings, USAGE_STREAM_REPLICAS): registry never creates or
 * updates it, and may not (nats-permissions.ts). It returns at once and, in the background, waits
 * for the stream to exist (a registry started before billing serves the catalog meanwhile), then
 * makes its consumer and reads.
 */
export async function startHosterUsageConsumer(
  nc: NatsConnection,
  names: EventNames,
  ctx: UsageFigureStores & {
    minutes: Pick<EndpointMinutesStore, "prune">;
    /**
     * Runs a batch's write in one transaction: its mismatch counts and its minutes are sums, so a
     * failure between the two must undo the first, or the batch, coming again, counts it twice.
     */
    transaction: <T>(work: (em?: Orm["em"]) => Promise<T>) => Promise<T>;
    /** Keeps events that cannot be read or written (registry's usage_dead_letters); resolves once committed. */
    deadLetters: (letters: readonly DeadLetter[]) => Promise<void>;
    clock: () => Date;
  },
  mismatches: Counter<"hoster_id">,
  log: Logger,
): Promise<HosterUsageConsumer> {
  const quiet = log.child({ component: "hoster-usage" });
  const stopping = new AbortController();
  // The real time, not ctx.clock (a test's): JetStream stamps events with its own.
  const startedAt = new Date();
  const consumerMade = (async () => {
    for (;;) {
      await waitForUsageStream(nc, names, quiet, stopping.signal);
      try {
        return await durableConsumer(nc, names, startedAt);
      } catch (err) {
        // The stream deleted between the two calls, or NATS away: look again.
        quiet.warn({ err }, "making the hoster-usage consumer failed; retrying");
        await sleep(1_000, undefined, { signal: stopping.signal });
      }
    }
  })();
  // Nobody need await it: a stop() before the stream exists must not surface as unhandled.
  const ready = consumerMade.then(() => undefined);
  ready.catch(() => undefined);
  let stopped = false;
  let prunedAt = 0;

  const loop = (async () => {
    const consumer = await consumerMade.catch(() => undefined);
    while (!stopped && consumer) {
      try {
        const first = await consumer.next({ expires: IDLE_WAIT_MS });
        if (!first) continue;
        const batch: JsMsg[] = [first];
        const queued = Math.min(first.info.pending, BATCH_SIZE - 1);
        if (queued > 0) {
          for await (const msg of await consumer.fetch({ max_messages: queued, expires: 1_000 })) batch.push(msg);
        }
        const now = ctx.clock();
        const counts = await record(batch, now);
        if (now.getTime() - prunedAt > PRUNE_EVERY_MS) {
          prunedAt = now.getTime();
          await ctx.minutes.prune(now);
        }
        // Raised once the batch is written: a batch that comes again is not counted twice here.
        for (const [hosterId, n] of counts) mismatches.inc({ hoster_id: hosterId }, n);
      } catch (err) {
        if (stopped) break;
        quiet.warn({ err }, "reading hosters' usage figures failed; retrying");
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  })();

  /**
   * Writes a batch's figures and acks its messages. Events that do not decode are dead-lettered
   * at once; when the write fails, each message is written alone, and one that still fails comes
   * again (nak) until its MAX_ATTEMPTS-th delivery, when its events are dead-lettered instead.
   * Nothing is acked before its letters are committed. Returns the mismatches written.
   */
  async function record(batch: readonly JsMsg[], now: Date): Promise<Map<string, number>> {
    const letters: DeadLetter[] = [];
    const read = batch.map((msg) => ({ msg, ...readMessage(msg, letters) }));
    const written = new Map<string, number>();
    const write = async (parts: typeof read) => {
      const events = parts.flatMap((part) => part.events);
      const counts = await ctx.transaction((em) => writeUsageFigures(ctx, events, now, quiet, em));
      for (const [hosterId, n] of counts) written.set(hosterId, (written.get(hosterId) ?? 0) + n);
    };
    const retry = new Set<JsMsg>();
    try {
      await write(read);
    } catch (err) {
      quiet.warn(
        { err, messages: batch.length },
        "recording hosters' usage figures failed; writing each message alone",
      );
      for (const part of read) {
        try {
          await write([part]);
        } catch (partErr) {
          const attempts = part.msg.info.deliveryCount;
          if (attempts < MAX_ATTEMPTS || isDependencyOutage(partErr)) {
            retry.add(part.msg);
            continue;
          }
          const reason = `writing hosters' figures failed ${attempts} times: ${(partErr as Error).message}`;
          for (const item of part.items) letters.push(letter(part.msg, item.data, reason, item.event.requestId));
        }
      }
    }
    if (letters.length > 0) {
      try {
        await ctx.deadLetters(letters);
        for (const item of letters) {
          quiet.error({ requestId: item.requestId, reason: item.reason }, "usage event dead-lettered by registry");
        }
      } catch (err) {
        quiet.error({ err, events: letters.length }, "usage dead letters not written; their messages come again");
        for (const msg of batch) retry.add(msg);
      }
    }
    for (const msg of batch) {
      if (retry.has(msg)) msg.nak(RETRY_DELAY_MS);
      else msg.ack();
    }
    return written;
  }

  return {
    ready,
    async stop() {
      stopped = true;
      stopping.abort();
      await loop;
    },
  };
}

/**
 * Registry's durable consumer of usage.completed, made by the first replica that starts (the
 * stream must exist), or found.
 */
async function durableConsumer(nc: NatsConnection, names: EventNames, startedAt: Date) {
  const jsm = await jetstreamManager(nc);
  const durable = names.hosterStatsConsumer;
  try {
    await jsm.consumers.info(names.usageStream, durable);
  } catch {
    await jsm.consumers.add(names.usageStream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      // Figures start from the events published since this replica started, not a week of
      // history; those published while it waited for billing to make the stream count too.
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: startedAt.toISOString(),
      filter_subject: names.usageCompleted,
      ack_wait: ACK_WAIT_NS,
    });
  }
  return jetstream(nc).consumers.get(names.usageStream, durable);
}

const letter = (msg: JsMsg, data: Uint8Array, reason: string, requestId?: string): DeadLetter => ({
  subject: msg.subject,
  data,
  reason,
  attempts: msg.info.deliveryCount,
  ...(requestId ? { requestId } : {}),
});

/** A message's events that decode; the bytes of those that do not go to `letters`. */
function readMessage(
  msg: JsMsg,
  letters: DeadLetter[],
): { events: UsageCompleted[]; items: Array<{ data: Uint8Array; event: UsageCompleted }> } {
  const items: Array<{ data: Uint8Array; event: UsageCompleted }> = [];
  let parts;
  try {
    parts = usageItems(msg.data, msg.headers);
  } catch (err) {
    letters.push(letter(msg, msg.data, `undecodable usage batch: ${(err as Error).message}`));
    return { events: [], items };
  }
  for (const part of parts) {
    try {
      items.push({ data: part.data, event: decodeUsageEvent(part.data) });
    } catch (err) {
      letters.push(letter(msg, part.data, `undecodable usage event: ${(err as Error).message}`));
    }
  }
  return { events: items.map((item) => item.event), items };
}
