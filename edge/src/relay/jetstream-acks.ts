import type { MsgHdrs, Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { connectionInbox } from "@mkt/runtime/nats";

/** JetStream's answer to a publish: where it stored the message, or that it already had its id. */
export interface PubAck {
  stream: string;
  seq: number;
  duplicate?: boolean;
}

interface Waiting {
  resolve: (ack: PubAck) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * JetStream publishes whose acks come to one subscription of this process's own, each under a
 * reply subject `<inbox>.<n>`. nats.js's `js.publish` goes through `nc.request`, whose request
 * object, once answered, cancels itself by building a `RequestError` (an Error with a stack) that
 * nothing reads: about 1% of the edge's CPU at one publish per answer. The ack is the same
 * message either way; reading it here builds nothing per publish but a timer and a map entry.
 * The replies come under the connection's own inbox prefix, as a request's would
 * (nats-permissions.ts lets each user subscribe only there).
 */
export class JetStreamAcks {
  readonly #nc: NatsConnection;
  readonly #inbox: string;
  readonly #sub: Subscription;
  readonly #waiting = new Map<string, Waiting>();
  #next = 0;

  constructor(nc: NatsConnection, inbox: string = connectionInbox(nc)) {
    this.#nc = nc;
    this.#inbox = inbox;
    this.#sub = nc.subscribe(`${inbox}.*`, { callback: (err, msg) => void (err ?? this.#answer(msg)) });
  }

  /** Publishes and resolves with JetStream's ack; rejects on its error, no stream, or `timeoutMs`. */
  publish(subject: string, data: Uint8Array, headers: MsgHdrs, timeoutMs: number): Promise<PubAck> {
    const token = String(++this.#next);
    return new Promise<PubAck>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(token);
        reject(new Error(`no JetStream ack within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting.set(token, { resolve, reject, timer });
      try {
        this.#nc.publish(subject, data, { reply: `${this.#inbox}.${token}`, headers });
      } catch (err) {
        // The connection is closed or draining: it fails now rather than at the timeout.
        clearTimeout(timer);
        this.#waiting.delete(token);
        reject(err as Error);
      }
    });
  }

  /** Stops listening; publishes still waiting fail at their timeout. */
  close(): void {
    this.#sub.unsubscribe();
  }

  #answer(msg: Msg): void {
    const token = msg.subject.slice(this.#inbox.length + 1);
    const waiting = this.#waiting.get(token);
    if (!waiting) return; // answered after its timeout: the publisher has moved on
    this.#waiting.delete(token);
    clearTimeout(waiting.timer);
    // No stream listens on the subject (the server's 503 "no responders" status).
    if (msg.headers?.code === 503) return waiting.reject(new Error("no JetStream stream answered (503 no responders)"));
    try {
      const ack = msg.json<PubAck & { error?: { code: number; description: string } }>();
      if (ack.error)
        waiting.reject(new Error(`JetStream refused the publish: ${ack.error.description} (${ack.error.code})`));
      else waiting.resolve(ack);
    } catch (err) {
      waiting.reject(err as Error);
    }
  }
}
