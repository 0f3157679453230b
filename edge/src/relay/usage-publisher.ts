import { randomUUID } from "node:crypto";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { UsageBatch, UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { endSpan, startPublishSpan, type Span } from "@mkt/runtime/nats-trace";
import { USAGE_BATCH_HEADER, usageBatchId } from "@mkt/runtime/usage-messages";
import { JetStreamAcks } from "./jetstream-acks.ts";
import type { RelayMetrics } from "./relay-metrics.ts";

/** While neither JetStream nor billing takes an event, the next try comes after this, doubling. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;
/**
 * The most events one message carries (about 150 KB, well under NATS's 1 MB max_payload); more
 * waiting make the next batch, published as soon as this one is acked.
 */
const MAX_BATCH_EVENTS = 500;

export interface UsagePublisherOptions {
  nc: NatsConnection;
  /** JetStream subject of usage.completed. */
  subject: string;
  /** This edge's EDGE_ID: with a boot id of this process's own and a sequence, each batch's message id. */
  edgeId?: string;
  /** How long one batch's ack is awaited before its events go to `recordUsage` (USAGE_PUBLISH_TIMEOUT_MS). */
  ackTimeoutMs: number;
  /** The longest an answer's last bytes wait for its event to be durable (USAGE_DURABLE_TIMEOUT_MS). */
  durableTimeoutMs: number;
  /** Billing's RecordUsage: settles events itself, idempotent on request_id (the fallback). */
  recordUsage?: (events: UsageCompleted[]) => Promise<void>;
  metrics: Pick<
    RelayMetrics,
    "usageDurable" | "usagePublishGroup" | "usageRecordFallbacks" | "usagePending" | "usageDurableTimeouts"
  >;
  log: Logger;
}

interface Entry {
  event: UsageCompleted;
  /** The chat request's trace, carried to billing's settlement inside the batch ('' when none). */
  traceparent: string;
  span: Span | undefined;
  stopTimer: (labels: { via: string }) => void;
  /** Resolves once JetStream or billing holds the event. */
  durable: Promise<void>;
  settle: () => void;
}

/** One message: its events and id fixed when it is made, the same on every retry and fallback. */
interface Batch {
  id: string;
  data: Uint8Array;
  entries: Entry[];
}

/**
 * Makes each answer's usage.completed durable, batched per publish
 * (docs/adr/0043-usage-events-batched-per-publish.md). One JetStream publish is in flight at a
 * time: the events handed over while it is (answers ending meanwhile) make the next batch, one
 * message, published as soon as it is acked; a lone answer on a quiet edge is published at the end
 * of its event-loop turn. A batch JetStream does not ack within `ackTimeoutMs` goes, whole, to
 * billing's RecordUsage. A batch is never regrouped: a retry publishes the same bytes under the
 * same message id (`<edge id>.<boot id>.<sequence>`), and billing settles a request once,
 * keyed on its request_id, whichever way and however often it came.
 *
 * `publish` resolves when its event is durable, or after `durableTimeoutMs`: the client then gets
 * the end of its answer and the event stays in this process's memory, retried with back-off
 * (`mkt_usage_pending_events`, `mkt_usage_durable_timeouts_total`; a crash of the edge then loses
 * it). Meanwhile the edge's leases run out without heartbeats reaching billing, so admission
 * stops: an edge that cannot record usage soon stops serving.
 */
export class UsagePublisher {
  readonly #acks: JetStreamAcks;
  readonly #options: UsagePublisherOptions;
  readonly #log: Logger;
  /** Handed over since the last batch was made: the next batch. */
  #next: Entry[] = [];
  /** Random per process: no two processes' batches share an id, restarts under one EDGE_ID included. */
  readonly #bootId = randomUUID();
  #sequence = 0n;
  /** A publish is awaiting its ack (the next batch waits for it). */
  #inFlight = false;
  #flushScheduled = false;
  /** Not durable after a try: retried until JetStream or billing takes them. */
  readonly #waiting = new Set<Batch>();
  #retryTimer: NodeJS.Timeout | undefined;
  #retryMs = FIRST_RETRY_MS;
  /** Publishes, fallbacks and retries still running (close waits for them). */
  readonly #running = new Set<Promise<void>>();
  /** The last batch needed the fallback: the next one is not worth another warning. */
  #fallingBack = false;
  #closed = false;

  constructor(options: UsagePublisherOptions) {
    this.#acks = new JetStreamAcks(options.nc);
    this.#options = options;
    this.#log = options.log.child({ component: "usage-publisher" });
  }

  /** Resolves when the event is durable, or when `durableTimeoutMs` has passed (it is then retried in the background). */
  publish(event: UsageCompleted): Promise<void> {
    const entry = this.#entry(event);
    this.#next.push(entry);
    this.#schedule();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.#options.metrics.usageDurableTimeouts.inc();
        this.#log.warn(
          { requestId: event.requestId },
          "usage event not durable within USAGE_DURABLE_TIMEOUT_MS; the answer ends, the event is retried from memory",
        );
        resolve();
      }, this.#options.durableTimeoutMs);
    });
    return Promise.race([entry.durable, late]).finally(() => clearTimeout(timer));
  }

  /** Events not durable yet (held in memory). */
  get pending(): number {
    let events = 0;
    for (const batch of this.#waiting) events += batch.entries.length;
    return events;
  }

  /**
   * Waits, at most `timeoutMs`, for every event handed over to be durable (before NATS drains on
   * shutdown). Returns how many were still not durable: those are lost with the process.
   */
  async close(timeoutMs = 10_000): Promise<number> {
    this.#closed = true;
    const deadline = Date.now() + timeoutMs;
    while ((this.#next.length > 0 || this.#running.size > 0 || this.#waiting.size > 0) && Date.now() < deadline) {
      if (this.#waiting.size > 0 && this.#running.size === 0) this.#track(this.#retry());
      await Promise.race([Promise.allSettled([...this.#running]), sleep(100)]);
    }
    clearTimeout(this.#retryTimer);
    this.#acks.close();
    const lost = this.pending + this.#next.length;
    if (lost > 0) this.#log.error({ lost }, "usage events not durable at shutdown");
    return lost;
  }

  #entry(event: UsageCompleted): Entry {
    const { span, headers } = startPublishSpan(this.#options.subject);
    let settle!: () => void;
    const durable = new Promise<void>((resolve) => (settle = resolve));
    return {
      event,
      traceparent: headers?.get("traceparent") ?? "",
      span,
      stopTimer: this.#options.metrics.usageDurable.startTimer(),
      durable,
      settle,
    };
  }

  /** Publishes the next batch at the end of this turn, unless a publish is in flight (its ack will). */
  #schedule(): void {
    if (this.#inFlight || this.#flushScheduled || this.#next.length === 0) return;
    this.#flushScheduled = true;
    setImmediate(() => {
      this.#flushScheduled = false;
      this.#track(this.#publishNext());
    });
  }

  #track(work: Promise<void>): void {
    this.#running.add(work);
    void work.finally(() => this.#running.delete(work));
  }

  /** Makes the next batch and publishes it; once acked (or timed out), the one after. */
  async #publishNext(): Promise<void> {
    if (this.#inFlight || this.#next.length === 0) return;
    const entries = this.#next.splice(0, MAX_BATCH_EVENTS);
    const batch = this.#batch(entries);
    this.#options.metrics.usagePublishGroup.observe(entries.length);
    this.#inFlight = true;
    let error: unknown;
    try {
      await this.#publishBatch(batch);
    } catch (err) {
      error = err;
    } finally {
      this.#inFlight = false;
      this.#schedule();
    }
    if (error === undefined) {
      this.#fallingBack = false;
      for (const entry of entries) this.#durable(entry, "jetstream");
      return;
    }
    if (!this.#fallingBack) {
      this.#fallingBack = true;
      this.#log.warn(
        { err: error, events: entries.length },
        "JetStream did not ack usage events in time; recording them through billing",
      );
    }
    if (!(await this.#record(batch))) this.#wait(batch);
  }

  #batch(entries: Entry[]): Batch {
    const message = UsageBatch.fromPartial({
      events: entries.map((entry) => asBuffer(UsageCompleted.encode(entry.event).finish())),
      traceparents: entries.map((entry) => entry.traceparent),
      edgeId: this.#options.edgeId ?? "edge",
      bootId: this.#bootId,
      sequence: ++this.#sequence,
    });
    return { id: usageBatchId(message), data: UsageBatch.encode(message).finish(), entries };
  }

  #publishBatch(batch: Batch): Promise<unknown> {
    const headers = natsHeaders();
    headers.set("Nats-Msg-Id", batch.id);
    headers.set(USAGE_BATCH_HEADER, "1");
    return this.#acks.publish(this.#options.subject, batch.data, headers, this.#options.ackTimeoutMs);
  }

  /** Hands a batch's events to billing's RecordUsage, together; true when billing committed them. */
  async #record(batch: Batch): Promise<boolean> {
    const recordUsage = this.#options.recordUsage;
    if (!recordUsage) return false;
    try {
      await recordUsage(batch.entries.map((entry) => entry.event));
    } catch (err) {
      this.#log.error(
        { err, events: batch.entries.length },
        "billing's RecordUsage failed too; usage events are held in memory and retried",
      );
      return false;
    }
    this.#options.metrics.usageRecordFallbacks.inc(batch.entries.length);
    for (const entry of batch.entries) this.#durable(entry, "record_usage");
    return true;
  }

  #durable(entry: Entry, via: "jetstream" | "record_usage"): void {
    entry.stopTimer({ via });
    endSpan(entry.span);
    entry.settle();
  }

  #wait(batch: Batch | undefined): void {
    if (batch) this.#waiting.add(batch);
    this.#options.metrics.usagePending.set(this.pending);
    if (this.#retryTimer || this.#closed) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#track(this.#retry());
    }, this.#retryMs);
    this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
  }

  /** The waiting batches, once more, each as it was made: JetStream, then billing. */
  async #retry(): Promise<void> {
    const batches = [...this.#waiting];
    if (batches.length === 0) return;
    const acks = await Promise.allSettled(batches.map((batch) => this.#publishBatch(batch)));
    let left = 0;
    for (const [i, batch] of batches.entries()) {
      const durable = acks[i]!.status === "fulfilled" || (await this.#record(batch));
      if (!durable) {
        left++;
        continue;
      }
      this.#waiting.delete(batch);
      if (acks[i]!.status === "fulfilled") for (const entry of batch.entries) this.#durable(entry, "jetstream");
    }
    this.#options.metrics.usagePending.set(this.pending);
    if (left === 0) {
      this.#retryMs = FIRST_RETRY_MS;
      this.#log.info("held usage events are durable again");
      return;
    }
    this.#wait(undefined);
  }
}

/** The same bytes as the Buffer ts-proto types `bytes` fields with (no copy). */
const asBuffer = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
