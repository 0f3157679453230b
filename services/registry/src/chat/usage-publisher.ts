import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";

const RETRY_DELAYS_MS = [100, 400, 1_600];
const PUBLISH_TIMEOUT_MS = 2_000;

/**
 * Publishes usage.completed events to JetStream with Nats-Msg-Id = request_id, so a retried
 * publish is dropped by the server's duplicate window and billing sees each request once.
 */
export class UsagePublisher {
  readonly #js: JetStreamClient;
  readonly #subject: string;
  readonly #log: Logger;

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
        await this.#js.publish(this.#subject, data, options);
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
}
