import type { Logger } from "@mkt/runtime/logger";
import type { Counter } from "prom-client";
import type { HosterStore } from "./hoster-store.ts";

/**
 * Counts hosters' usage mismatches: the Prometheus counter at once, the hosters' persisted
 * `usage_mismatches` in batches off the request path (one UPDATE per hoster per flush). A failed
 * flush keeps its counts for the next one; nothing here ever fails a request. Counts still pending
 * when the process dies are lost: the figure is a warning sign, not a ledger.
 */
export class UsageMismatchRecorder {
  readonly #store: HosterStore;
  readonly #counter: Counter<"hoster_id">;
  readonly #log: Logger;
  #pending = new Map<string, number>();
  #flushing: Promise<void> = Promise.resolve();
  readonly #timer: NodeJS.Timeout;

  constructor(store: HosterStore, counter: Counter<"hoster_id">, log: Logger, flushEveryMs: number) {
    this.#store = store;
    this.#counter = counter;
    this.#log = log;
    this.#timer = setInterval(() => void this.flush(), flushEveryMs);
    this.#timer.unref();
  }

  record(hosterId: string, reason: string): void {
    this.#counter.inc({ hoster_id: hosterId });
    this.#pending.set(hosterId, (this.#pending.get(hosterId) ?? 0) + 1);
    this.#log.info({ hosterId, reason }, "hoster usage report disagrees with the registry's count");
  }

  /** Writes the pending counts; flushes never overlap. */
  flush(): Promise<void> {
    this.#flushing = this.#flushing.then(() => this.#write());
    return this.#flushing;
  }

  async #write(): Promise<void> {
    if (this.#pending.size === 0) return;
    const batch = this.#pending;
    this.#pending = new Map();
    for (const [hosterId, count] of batch) {
      try {
        await this.#store.addUsageMismatches(hosterId, count);
      } catch (err) {
        this.#pending.set(hosterId, (this.#pending.get(hosterId) ?? 0) + count);
        this.#log.warn({ err, hosterId }, "saving usage mismatches failed; retrying at the next flush");
      }
    }
  }

  /** Stops the timer and writes what is pending (before the database closes). */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
  }
}
