import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import type { NatsConnection } from "@mkt/runtime/nats";

type PublishOptions = NonNullable<Parameters<JetStreamClient["publish"]>[2]>;

/**
 * The one way registry puts an encoded usage.completed into JetStream, live or replayed from the
 * outbox: `Nats-Msg-Id = request_id`, so a second copy within the stream's duplicate window is
 * dropped by the server, and the promise settles when JetStream acked the event or `ackTimeoutMs`
 * passed (an error: the caller falls back to the outbox or keeps the row).
 */
export class UsageStream {
  readonly #js: JetStreamClient;
  readonly #subject: string;
  readonly #ackTimeoutMs: number;
  /** Publishes waiting for this turn of the event loop to end (see publish). */
  #queued: Array<() => void> = [];

  constructor(nc: NatsConnection, subject: string, ackTimeoutMs: number) {
    this.#js = jetstream(nc);
    this.#subject = subject;
    this.#ackTimeoutMs = ackTimeoutMs;
  }

  get subject(): string {
    return this.#subject;
  }

  /**
   * Publishes once this turn of the event loop is over, together with every other event of the
   * turn. nats.js writes what was published since the last microtask checkpoint in one system
   * call, and the requests that end in one turn each end in their own callback: published from
   * one callback, they leave in one write (one wake-up of the server) instead of one each.
   */
  publish(data: Uint8Array, requestId: string, headers?: MsgHdrs): Promise<void> {
    const options: PublishOptions = {
      timeout: this.#ackTimeoutMs,
      ...(requestId ? { msgID: requestId } : {}),
      ...(headers ? { headers } : {}),
    };
    return new Promise((resolve, reject) => {
      this.#queued.push(() => void this.#js.publish(this.#subject, data, options).then(() => resolve(), reject));
      if (this.#queued.length > 1) return;
      setImmediate(() => {
        const batch = this.#queued;
        this.#queued = [];
        for (const publish of batch) publish();
      });
    });
  }
}
