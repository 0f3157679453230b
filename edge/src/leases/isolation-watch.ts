import { performance } from "node:perf_hooks";
import { AppError } from "@mkt/runtime/errors";
import type { Logger } from "@mkt/runtime/logger";

/** What an answer still running on an edge cut off from billing is told. */
const CUT_OFF = "This server lost contact with the billing service; please retry the request.";

/**
 * The edge's bound on how long anything it admitted may run without billing: once no lease call
 * sent in the last EDGE_ISOLATION_MS (billing's, from its replies: lease-settings.ts) has been
 * answered, `signal` aborts and the answers in flight
 * end with an error event. Billing, which no longer hears from the edge, releases the edge's
 * unreported leases at their deadline + the same EDGE_ISOLATION_MS, counting on this: nothing
 * admitted on them can still be running. A call billing answers again brings a fresh signal.
 * Times are send times on the monotonic clock: billing answered after the call was sent, so its
 * deadline for the edge is later than the edge's own count.
 */
export class IsolationWatch {
  #isolationMs: number;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #inFlight: () => number;
  #controller = new AbortController();
  #lastContactAt: number;
  #timer: NodeJS.Timeout | undefined;
  #ended = false;

  constructor(options: {
    /** Billing's EDGE_ISOLATION_MS; none (Infinity) until billing's first reply sets it. */
    isolationMs?: number;
    log: Logger;
    /** Monotonic ms (performance.now by default). */
    now?: () => number;
    /** Requests admitted and still running, for the log line. */
    inFlight?: () => number;
  }) {
    this.#isolationMs = options.isolationMs ?? Infinity;
    this.#log = options.log;
    this.#now = options.now ?? (() => performance.now());
    this.#inFlight = options.inFlight ?? (() => 0);
    this.#lastContactAt = this.#now();
    this.#schedule();
  }

  get isolationMs(): number {
    return this.#isolationMs;
  }

  /** Billing's bound as the edge now runs by it (BillingLeaseSettings: it only goes down). */
  setBound(isolationMs: number): void {
    if (isolationMs === this.#isolationMs) return;
    this.#isolationMs = isolationMs;
    this.stop();
    this.#schedule();
  }

  /** Aborts (with an AppError as its reason) when the edge is cut off from billing for too long. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Billing answered a lease call sent at `sentAt` (monotonic ms). */
  contact(sentAt: number): void {
    if (this.#ended || sentAt <= this.#lastContactAt) return;
    this.#lastContactAt = sentAt;
    if (this.#controller.signal.aborted) {
      this.#controller = new AbortController();
      this.#log.info("billing answers again: admitting and relaying");
    }
    this.#schedule();
  }

  /** For good: this process may not serve what it admitted any longer (another took its EDGE_ID). */
  end(reason: AppError): void {
    this.#ended = true;
    this.stop();
    if (!this.#controller.signal.aborted) this.#controller.abort(reason);
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** One timer at a time (contacts come with every grant): it re-arms itself until the bound passes. */
  #schedule(): void {
    // No bound yet: nothing was admitted (every lease comes in a reply, which sets it).
    if (this.#timer || this.#ended || !Number.isFinite(this.#isolationMs)) return;
    const due = this.#lastContactAt + this.#isolationMs - this.#now();
    this.#timer = setTimeout(() => this.#check(), Math.max(0, due));
    this.#timer.unref();
  }

  #check(): void {
    this.#timer = undefined;
    const silentMs = this.#now() - this.#lastContactAt;
    if (silentMs < this.#isolationMs) {
      this.#schedule();
      return;
    }
    if (this.#controller.signal.aborted) return;
    const inFlight = this.#inFlight();
    if (inFlight > 0) {
      this.#log.warn(
        { silentMs: Math.round(silentMs), inFlight },
        "cut off from billing: ending the answers in flight",
      );
    }
    this.#controller.abort(new AppError("service_unavailable", CUT_OFF));
  }
}

/**
 * The signal an answer is relayed under: it aborts when the edge's shutdown grace is over or
 * when the edge is cut off from billing (taken per answer: the watch's signal is replaced when
 * billing answers again).
 */
export function answerCutoff(shutdown: AbortSignal, isolation: IsolationWatch): AbortSignal {
  return AbortSignal.any([shutdown, isolation.signal]);
}
