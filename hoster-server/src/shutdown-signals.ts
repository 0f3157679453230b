/**
 * What running responses watch during shutdown. `closing` fires as soon as close starts (the demo
 * model stops pacing and finishes its answers at once: the delay is only a simulation); `cut`
 * fires when the grace period is over (proxied streams are aborted, so close never hangs on a
 * long upstream answer).
 */
export class ShutdownSignals {
  readonly #closing = new AbortController();
  readonly #cut = new AbortController();

  get closing(): AbortSignal {
    return this.#closing.signal;
  }

  get cut(): AbortSignal {
    return this.#cut.signal;
  }

  /** Starts shutdown; returns a function that cancels the pending cut once close is done. */
  begin(graceMs: number): () => void {
    this.#closing.abort();
    const timer = setTimeout(() => this.#cut.abort(), graceMs);
    return () => clearTimeout(timer);
  }
}
