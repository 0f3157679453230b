export interface OutlierOptions {
  /** Live failures in a row (no success between) that eject an upstream (UPSTREAM_EJECT_AFTER_FAILURES). */
  ejectAfterFailures: number;
  /** The first ejection's length; each further one doubles it (UPSTREAM_EJECT_BACKOFF_MS). */
  backoffMs: number;
  /** Milliseconds; tests may set it. */
  now?: () => number;
}

/** The longest ejection, as a multiple of the first one. */
export const MAX_BACKOFF_FACTOR = 8;

interface OutlierState {
  /** Failures since the last success or ejection. */
  failures: number;
  /** Ejections since the last success: the next back-off is backoffMs × 2^ejections, capped. */
  ejections: number;
  ejectedUntil: number;
  /** When it last failed (this replica's clock), kept past a success: routing reads it. */
  lastFaultAt: number;
}

/** An upstream that failed this recently comes after the others in an open model's routing. */
export const RECENT_FAULT_MS = 30_000;

/**
 * Outlier ejection of upstream servers, as Envoy does it, in this replica's memory: after
 * `ejectAfterFailures` live failures in a row an upstream takes no calls for a back-off period
 * (doubled on each ejection without a success between, at most MAX_BACKOFF_FACTOR times the
 * first). When the back-off ends it takes calls again on probation: its first failure ejects it
 * again at once, its first success forgets its record. A hoster's successful health probe also
 * forgets it (`recovered`). Keys are UpstreamTarget.key; only upstream faults are reported here,
 * never a caller's cancel or the runaway guard's cut.
 */
export class OutlierTracker {
  readonly #states = new Map<string, OutlierState>();
  readonly #options: OutlierOptions;
  readonly #now: () => number;

  constructor(options: OutlierOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
  }

  /** True while `key` is ejected: callers must not send it traffic. */
  isEjected(key: string): boolean {
    const state = this.#states.get(key);
    return !!state && state.ejectedUntil > this.#now();
  }

  /** True when `key` failed a call within RECENT_FAULT_MS. */
  faultedRecently(key: string): boolean {
    const state = this.#states.get(key);
    return !!state && this.#now() - state.lastFaultAt < RECENT_FAULT_MS;
  }

  /** An upstream answered a whole request: it is healthy again (its last fault still counts as recent). */
  succeeded(key: string): void {
    const state = this.#states.get(key);
    if (!state) return;
    if (this.#now() - state.lastFaultAt >= RECENT_FAULT_MS) this.#states.delete(key);
    else Object.assign(state, { failures: 0, ejections: 0, ejectedUntil: 0 });
  }

  /** A successful health probe: the same as a success. */
  recovered(key: string): void {
    this.#states.delete(key);
  }

  /** An upstream failed a call; returns true when this failure ejected it. */
  failed(key: string): boolean {
    const now = this.#now();
    const state = this.#states.get(key) ?? { failures: 0, ejections: 0, ejectedUntil: 0, lastFaultAt: now };
    this.#states.set(key, state);
    state.lastFaultAt = now;
    // A call that started before the ejection may still fail during it: that is no new evidence.
    if (state.ejectedUntil > now) return false;
    state.failures++;
    const onProbation = state.ejections > 0;
    if (!onProbation && state.failures < this.#options.ejectAfterFailures) return false;
    const factor = Math.min(2 ** state.ejections, MAX_BACKOFF_FACTOR);
    state.ejections++;
    state.failures = 0;
    state.ejectedUntil = now + this.#options.backoffMs * factor;
    return true;
  }
}
