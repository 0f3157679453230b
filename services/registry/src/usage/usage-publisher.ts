import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Logger } from "@mkt/runtime/logger";
import { endSpan, startPublishSpan } from "@mkt/runtime/nats-trace";
import type { Counter, Gauge, Histogram } from "prom-client";
import type { UsageOutbox } from "./usage-outbox.ts";
import type { UsageStream } from "./usage-stream.ts";

/** When neither JetStream nor the outbox took an event, the next try comes after this, doubling. */
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;

export interface UsagePublisherMetrics {
  /** Events written to the outbox because JetStream did not ack in time. */
  outboxWritten: Counter;
  /** The outbox's depth, counted at each replay pass; raised here so a scrape sees it at once. */
  outboxDepth: Gauge;
  /** Tries in which neither JetStream nor the outbox took an event. */
  durabilityFailures: Counter;
  /** From publish to durable, by where (`jetstream` or `outbox`). */
  durable: Histogram<"via">;
}

/**
 * Makes each usage.completed durable before the chat call ends (docs/usage-outbox.md): published
 * to JetStream (Nats-Msg-Id = request_id), or, when JetStream does not ack within
 * USAGE_PUBLISH_TIMEOUT_MS, written to registry's outbox, which the OutboxReplayer replays. The
 * common path writes nothing to the database.
 */
export class UsagePublisher {
  readonly #stream: UsageStream;
  readonly #outbox: Pick<UsageOutbox, "add">;
  readonly #metrics: UsagePublisherMetrics;
  readonly #log: Logger;
  /** The last event went to the outbox: the next fallback is not worth another warning. */
  #fallingBack = false;

  constructor(stream: UsageStream, outbox: Pick<UsageOutbox, "add">, metrics: UsagePublisherMetrics, log: Logger) {
    this.#stream = stream;
    this.#outbox = outbox;
    this.#metrics = metrics;
    this.#log = log;
  }

  /**
   * Resolves once JetStream or the outbox holds the event, so a crash after the call ends loses
   * nothing. Never throws: while both fail (NATS and Postgres down together) it keeps trying with
   * back-off, logging each failure; the call's end waits, as its usage is not safe yet.
   */
  async publish(event: UsageCompleted): Promise<void> {
    const data = UsageCompleted.encode(event).finish();
    // The headers carry the chat request's trace to billing's settlement (nats-trace.ts).
    const { span, headers } = startPublishSpan(this.#stream.subject);
    const stopTimer = this.#metrics.durable.startTimer();
    for (let retryMs = FIRST_RETRY_MS; ; retryMs = Math.min(retryMs * 2, MAX_RETRY_MS)) {
      let notAcked: unknown;
      try {
        await this.#stream.publish(data, event.requestId, headers);
        stopTimer({ via: "jetstream" });
        this.#fallingBack = false;
        endSpan(span);
        return;
      } catch (err) {
        notAcked = err;
      }
      try {
        await this.#outbox.add(event.requestId, data);
        stopTimer({ via: "outbox" });
        this.#metrics.outboxWritten.inc();
        this.#metrics.outboxDepth.inc();
        if (!this.#fallingBack) {
          this.#fallingBack = true;
          this.#log.warn(
            { err: notAcked },
            "JetStream did not ack a usage event in time; usage events go to the outbox",
          );
        }
        endSpan(span, notAcked);
        return;
      } catch (err) {
        this.#metrics.durabilityFailures.inc();
        this.#log.error(
          { err, notAcked, requestId: event.requestId, retryInMs: retryMs },
          "usage event not durable yet: JetStream did not ack and the outbox write failed; retrying",
        );
      }
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  }
}
