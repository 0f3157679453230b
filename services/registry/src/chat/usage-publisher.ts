import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";

const RETRY_DELAYS_MS = [100, 400, 1_600];
const PUBLISH_TIMEOUT_MS = 2_000;

type PublishOptions = Parameters<JetStreamClient["publish"]>[2];

/**
 * Publishes usage.completed events to JetStream with Nats-Msg-Id = request_id, so a retried
 * publish is dropped by the server's duplicate window and billing sees each request once.
 */
export class UsagePublisher {
  readonly #js: JetStreamClient;
  readonly #subject: string;
  readonly #log: Logger;
  /** Publishes waiting for this turn of the event loop to end (see #send). */
  #queued: Array<() => void> = [];

  constructor(nc: NatsConnection, subject: string, log: Logger) {
    this.#js = jetstream(nc);
    this.#subject = subject;
    this.#log = log;
  }

  /** Never throws: after the last retry the loss is logged (billing's expiry sweeper is the backstop). */
  async publish(event: UsageCompleted): Promise<void> {
    const data = UsageCompleted.encode(event).finish();
    const options = { timeout: PUBLISH_TIMEOUT_MS, ...(event.requestId ? { msgID: event.requestId } : {}) };
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#send(data, options);
        return;
      } catch (err) {
        const delay = RETRY_DELAYS_MS[attempt];
        if (delay === undefined) {
          this.#log.error(
            { err, requestId: event.requestId, reservationId: event.reservationId, attempts: attempt + 1 },
            "USAGE EVENT LOST: could not publish usage.completed; the reservation will expire unbilled",
          );
          return;
        }
        this.#log.warn({ err, requestId: event.requestId, attempt: attempt + 1 }, "usage publish failed; retrying");
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  /**
   * Publishes once this turn of the event loop is over, together with every other event of the
   * turn. nats.js writes what was published since the last microtask checkpoint in one system
   * call, and the requests that end in one turn each end in their own callback: published from
   * one callback, they leave in one write (one wake-up of the server) instead of one each.
   */
  #send(data: Uint8Array, options: PublishOptions): Promise<unknown> {
    return new Promise((resolve, reject) => {
      this.#queued.push(() => void this.#js.publish(this.#subject, data, options).then(resolve, reject));
      if (this.#queued.length > 1) return;
      setImmediate(() => {
        const batch = this.#queued;
        this.#queued = [];
        for (const publish of batch) publish();
      });
    });
  }
}
