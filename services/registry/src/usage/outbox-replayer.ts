import type { Logger } from "@mkt/runtime/logger";
import type { NatsConnection } from "@mkt/runtime/nats";
import type { Counter, Gauge } from "prom-client";
import type { UsageOutbox } from "./usage-outbox.ts";
import type { UsageStream } from "./usage-stream.ts";

/** Rows per replay transaction (published together, then deleted together). */
const REPLAY_BATCH = 256;
/** After a failed pass, the next comes this soon, doubling up to the interval. */
const FIRST_RETRY_MS = 250;

export interface OutboxReplayerOptions {
  outbox: Pick<UsageOutbox, "replay" | "depth">;
  stream: Pick<UsageStream, "publish">;
  nc: NatsConnection;
  /** Passes come this often even with nothing known to replay (rows left by a replica that died). */
  intervalMs: number;
  metrics: { depth: Gauge; replayed: Counter };
  log: Logger;
}

/**
 * Replays the usage outbox to JetStream: at start, when the NATS connection comes back, and every
 * `intervalMs` (JetStream can be slow without the connection dropping). A pass replays batch after batch until the
 * outbox is empty or JetStream stops acking; failed passes are retried with a growing delay. A
 * replay is harmless: each event keeps its Nats-Msg-Id = request_id (see docs/usage-outbox.md).
 */
export class OutboxReplayer {
  readonly #options: OutboxReplayerOptions;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  /** A trigger came during a pass: run another right after it. */
  #again = false;
  #retryMs = FIRST_RETRY_MS;
  #stopped = false;

  constructor(options: OutboxReplayerOptions) {
    this.#options = options;
  }

  /** Replays what an earlier run (or another replica) left, and listens for reconnects. */
  start(): void {
    void (async () => {
      for await (const status of this.#options.nc.status()) {
        if (this.#stopped) return;
        if (status.type === "reconnect") this.trigger();
      }
    })();
    this.trigger();
  }

  /** Runs a pass now, or right after the one in progress. */
  trigger(): void {
    if (this.#stopped) return;
    if (this.#running) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#timer);
    this.#running = this.#pass().finally(() => {
      this.#running = undefined;
      if (this.#again) {
        this.#again = false;
        this.trigger();
      }
    });
  }

  /** Stops the timer and waits for a pass in progress (before NATS drains and the database closes). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
  }

  async #pass(): Promise<void> {
    const { outbox, stream, metrics, log } = this.#options;
    let replayed = 0;
    let complete = false;
    try {
      for (;;) {
        const result = await outbox.replay(REPLAY_BATCH, (row) => stream.publish(row.payload, row.requestId));
        replayed += result.acked;
        metrics.replayed.inc(result.acked);
        if (result.firstError !== undefined) {
          log.warn({ err: result.firstError, replayed }, "usage outbox replay stopped: JetStream did not ack");
          break;
        }
        if (result.taken < REPLAY_BATCH) {
          complete = true;
          break;
        }
      }
      metrics.depth.set(await outbox.depth());
    } catch (err) {
      log.warn({ err, replayed }, "usage outbox replay failed");
    }
    if (replayed > 0) log.info({ replayed, complete }, "usage events replayed from the outbox");
    if (this.#stopped) return;
    const delay = complete ? this.#options.intervalMs : this.#retryMs;
    this.#retryMs = complete ? FIRST_RETRY_MS : Math.min(this.#retryMs * 2, this.#options.intervalMs);
    this.#timer = setTimeout(() => this.trigger(), delay);
    this.#timer.unref();
  }
}
