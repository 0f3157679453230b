import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { isUuid } from "@mkt/runtime/ids";
import type { Logger } from "@mkt/runtime/logger";
import type { EventNames, NatsConnection } from "@mkt/runtime/nats";
import { ensureUsageStream } from "@mkt/runtime/nats";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Counter } from "prom-client";
import { minutesOf } from "./endpoint-figures.ts";
import type { EndpointMinutesStore } from "./endpoint-minutes-store.ts";
import type { HosterStore } from "./hoster-store.ts";

/** Events taken per batch: one statement writes the whole batch's figures. */
const BATCH_SIZE = 500;
/** How long one pull waits for an event; also bounds how long stop() waits. */
const IDLE_WAIT_MS = 2_000;
/** A batch not acked this long (a replica killed with it in hand) is delivered again. */
const ACK_WAIT_NS = 30_000 * 1_000_000;
/** How often a replica removes endpoint minutes older than a day. */
const PRUNE_EVERY_MS = 10 * 60_000;

export interface HosterUsageConsumer {
  stop(): Promise<void>;
}

/**
 * Keeps each hoster's figures from the edges' usage.completed events (its usage reports that
 * disagreed with the edge's count, and each of its models' live figures by the minute): one durable
 * pull consumer shared by registry's replicas (each event reaches one of them), batches written
 * with one set-based statement and acked after it. A batch whose write failed is not acked and
 * comes again; a replica killed after the write but before the ack counts that batch twice, which
 * the figure (a warning sign, not a ledger) tolerates. Events billing took through RecordUsage
 * while JetStream was down never reach the stream, so they are missing here.
 */
export async function startHosterUsageConsumer(
  nc: NatsConnection,
  names: EventNames,
  ctx: {
    store: Pick<HosterStore, "addUsageMismatches">;
    minutes: Pick<EndpointMinutesStore, "add" | "prune">;
    clock: () => Date;
  },
  mismatches: Counter<"hoster_id">,
  log: Logger,
): Promise<HosterUsageConsumer> {
  await ensureUsageStream(nc, names);
  const jsm = await jetstreamManager(nc);
  const durable = names.hosterStatsConsumer;
  try {
    await jsm.consumers.info(names.usageStream, durable);
  } catch {
    await jsm.consumers.add(names.usageStream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      // Figures start from the events that arrive once it exists, not a week of history.
      deliver_policy: DeliverPolicy.New,
      filter_subject: names.usageCompleted,
      ack_wait: ACK_WAIT_NS,
    });
  }
  const consumer = await jetstream(nc).consumers.get(names.usageStream, durable);
  const quiet = log.child({ component: "hoster-usage" });
  let stopped = false;
  let prunedAt = 0;

  const loop = (async () => {
    while (!stopped) {
      try {
        const first = await consumer.next({ expires: IDLE_WAIT_MS });
        if (!first) continue;
        const batch: JsMsg[] = [first];
        const queued = Math.min(first.info.pending, BATCH_SIZE - 1);
        if (queued > 0) {
          for await (const msg of await consumer.fetch({ max_messages: queued, expires: 1_000 })) batch.push(msg);
        }
        const events = decodeAll(batch);
        const counts = countMismatches(events, quiet);
        const now = ctx.clock();
        await ctx.store.addUsageMismatches(counts);
        await ctx.minutes.add(minutesOf(events, now));
        for (const msg of batch) msg.ack();
        if (now.getTime() - prunedAt > PRUNE_EVERY_MS) {
          prunedAt = now.getTime();
          await ctx.minutes.prune(now);
        }
        // Raised once the batch is written: a batch that comes again is not counted twice here.
        for (const [hosterId, n] of counts) mismatches.inc({ hoster_id: hosterId }, n);
      } catch (err) {
        if (stopped) break;
        quiet.warn({ err }, "recording hosters' usage figures failed; the batch comes again");
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  })();

  return {
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

/** The batch's events that decode (billing reports those that do not; nothing to count here). */
function decodeAll(batch: readonly JsMsg[]): UsageCompleted[] {
  const events: UsageCompleted[] = [];
  for (const msg of batch) {
    try {
      events.push(UsageCompleted.decode(msg.data));
    } catch {
      continue;
    }
  }
  return events;
}

/** Mismatched reports per hoster in a batch. */
function countMismatches(events: readonly UsageCompleted[], log: Logger): Map<string, number> {
  const counts = new Map<string, number>();
  for (const event of events) {
    if (event.usageMismatch === "" || event.provider !== "hoster" || !isUuid(event.hosterId)) continue;
    const hosterId = event.hosterId.toLowerCase();
    counts.set(hosterId, (counts.get(hosterId) ?? 0) + 1);
    log.info({ hosterId, reason: event.usageMismatch }, "hoster usage report disagrees with the edge's count");
  }
  return counts;
}
