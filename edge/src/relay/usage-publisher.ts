import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import { endSpan, startPublishSpan, type Span } from "@mkt/runtime/nats-trace";
import type { RelayMetrics } from "./relay-metrics.ts";

/** While neither JetStream nor billing takes an event, the next try comes after this, doubling. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;

export interface UsagePublisherOptions {
  nc: NatsConnection;
  /** JetStream subject of usage.completed. */
  subject: string;
  /** How long one group's acks are awaited before its unacked events go to `recordUsage` (USAGE_PUBLISH_TIMEOUT_MS). */
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
  data: Uint8Array;
  headers: MsgHdrs | undefined;
  span: Span | undefined;
  stopTimer: (labels: { via: string }) => void;
  /** Resolves once JetStream or billing holds the event. */
  durable: Promise<void>;
  settle: () => void;
}

/**
 * Makes each answer's usage.completed durable, group-committed. Events handed over in one turn of
 * the event loop (answers ending together) are published to JetStream together (nats.js writes
 * them in one system call, the server acks them together) and their acks awaited together; the
 * ones JetStream does not ack within `ackTimeoutMs` go to billing's RecordUsage in one call. Each
 * event carries `Nats-Msg-Id = request_id`, and billing settles a request once whichever way it
 * came, so a late ack after the fallback costs nothing.
 *
 * `publish` resolves when its event is durable, or after `durableTimeoutMs`: the client then gets
 * the end of its answer and the event stays in this process's memory, retried with back-off
 * (`mkt_usage_pending_events`, `mkt_usage_durable_timeouts_total`; a crash of the edge then loses
 * it). Meanwhile the edge's leases run out without heartbeats reaching billing, so admission
 * stops: an edge that cannot record usage soon stops serving.
 */
export class UsagePublisher {
  readonly #js: JetStreamClient;
  readonly #options: UsagePublisherOptions;
  readonly #log: Logger;
  /** Handed over in this turn of the event loop, published together at its end. */
  #group: Entry[] = [];
  /** Not durable after a try: retried until JetStream or billing takes them. */
  readonly #waiting = new Set<Entry>();
  #retryTimer: NodeJS.Timeout | undefined;
  #retryMs = FIRST_RETRY_MS;
  /** Group commits and retries still running (close waits for them). */
  readonly #running = new Set<Promise<void>>();
  /** The last group needed the fallback: the next one is not worth another warning. */
  #fallingBack = false;
  #closed = false;

  constructor(options: UsagePublisherOptions) {
    this.#js = jetstream(options.nc);
    this.#options = options;
    this.#log = options.log.child({ component: "usage-publisher" });
  }

  /** Resolves when the event is durable, or when `durableTimeoutMs` has passed (it is then retried in the background). */
  publish(event: UsageCompleted): Promise<void> {
    const entry = this.#entry(event);
    this.#group.push(entry);
    if (this.#group.length === 1) setImmediate(() => this.#track(this.#commit(this.#takeGroup())));
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
    return this.#waiting.size;
  }

  /**
   * Waits, at most `timeoutMs`, for every event handed over to be durable (before NATS drains on
   * shutdown). Returns how many were still not durable: those are lost with the process.
   */
  async close(timeoutMs = 10_000): Promise<number> {
    this.#closed = true;
    const deadline = Date.now() + timeoutMs;
    while ((this.#group.length > 0 || this.#running.size > 0 || this.#waiting.size > 0) && Date.now() < deadline) {
      if (this.#waiting.size > 0 && this.#running.size === 0) this.#track(this.#retry());
      await Promise.race([Promise.allSettled([...this.#running]), sleep(100)]);
    }
    clearTimeout(this.#retryTimer);
    const lost = this.#waiting.size + this.#group.length;
    if (lost > 0) this.#log.error({ lost }, "usage events not durable at shutdown");
    return lost;
  }

  #entry(event: UsageCompleted): Entry {
    // The headers carry the chat request's trace to billing's settlement.
    const { span, headers } = startPublishSpan(this.#options.subject);
    let settle!: () => void;
    const durable = new Promise<void>((resolve) => (settle = resolve));
    return {
      event,
      data: UsageCompleted.encode(event).finish(),
      headers,
      span,
      stopTimer: this.#options.metrics.usageDurable.startTimer(),
      durable,
      settle,
    };
  }

  #takeGroup(): Entry[] {
    const group = this.#group;
    this.#group = [];
    return group;
  }

  #track(work: Promise<void>): void {
    this.#running.add(work);
    void work.finally(() => this.#running.delete(work));
  }

  /** One group: published together, acks awaited together, the unacked to billing together. */
  async #commit(group: Entry[]): Promise<void> {
    if (group.length === 0) return;
    this.#options.metrics.usagePublishGroup.observe(group.length);
    const acks = await Promise.allSettled(group.map((entry) => this.#publishOne(entry)));
    const unacked: Entry[] = [];
    let error: unknown;
    acks.forEach((ack, i) => {
      const entry = group[i]!;
      if (ack.status === "fulfilled") this.#durable(entry, "jetstream");
      else {
        error ??= ack.reason;
        unacked.push(entry);
      }
    });
    if (unacked.length === 0) {
      this.#fallingBack = false;
      return;
    }
    if (!this.#fallingBack) {
      this.#fallingBack = true;
      this.#log.warn(
        { err: error, events: unacked.length },
        "JetStream did not ack usage events in time; recording them through billing",
      );
    }
    if (!(await this.#record(unacked))) this.#wait(unacked);
  }

  #publishOne(entry: Entry): Promise<unknown> {
    return this.#js.publish(this.#options.subject, entry.data, {
      msgID: entry.event.requestId,
      timeout: this.#options.ackTimeoutMs,
      ...(entry.headers ? { headers: entry.headers } : {}),
    });
  }

  /** Hands events to billing's RecordUsage; true when billing committed them. */
  async #record(entries: Entry[]): Promise<boolean> {
    const recordUsage = this.#options.recordUsage;
    if (!recordUsage) return false;
    try {
      await recordUsage(entries.map((entry) => entry.event));
    } catch (err) {
      this.#log.error(
        { err, events: entries.length },
        "billing's RecordUsage failed too; usage events are held in memory and retried",
      );
      return false;
    }
    this.#options.metrics.usageRecordFallbacks.inc(entries.length);
    for (const entry of entries) this.#durable(entry, "record_usage");
    return true;
  }

  #durable(entry: Entry, via: "jetstream" | "record_usage"): void {
    if (this.#waiting.delete(entry)) this.#options.metrics.usagePending.set(this.#waiting.size);
    entry.stopTimer({ via });
    endSpan(entry.span);
    entry.settle();
  }

  #wait(entries: Entry[]): void {
    for (const entry of entries) this.#waiting.add(entry);
    this.#options.metrics.usagePending.set(this.#waiting.size);
    if (this.#retryTimer || this.#closed) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#track(this.#retry());
    }, this.#retryMs);
    this.#retryMs = Math.min(this.#retryMs * 2, MAX_RETRY_MS);
  }

  /** The waiting events, once more: JetStream, then billing. */
  async #retry(): Promise<void> {
    const entries = [...this.#waiting];
    if (entries.length === 0) return;
    const acks = await Promise.allSettled(entries.map((entry) => this.#publishOne(entry)));
    const unacked = entries.filter((entry, i) => {
      if (acks[i]!.status === "rejected") return true;
      this.#durable(entry, "jetstream");
      return false;
    });
    if (unacked.length > 0 && (await this.#record(unacked))) unacked.length = 0;
    if (unacked.length === 0) {
      this.#retryMs = FIRST_RETRY_MS;
      this.#log.info("held usage events are durable again");
      return;
    }
    this.#wait([]);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
