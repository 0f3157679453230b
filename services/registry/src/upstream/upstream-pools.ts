import { Pool } from "undici";

/**
 * One keep-alive connection pool per upstream origin, shared by every call to it. Timeouts on
 * the body and headers are enforced per call by the upstream client (which knows the phases);
 * the pool only bounds how long a TCP/TLS connect may take.
 */
export class UpstreamPools {
  readonly #pools = new Map<string, Pool>();
  readonly #connectTimeoutMs: number;

  constructor(connectTimeoutMs: number) {
    this.#connectTimeoutMs = connectTimeoutMs;
  }

  get(origin: string): Pool {
    let pool = this.#pools.get(origin);
    if (!pool) {
      pool = new Pool(origin, {
        connect: { timeout: this.#connectTimeoutMs },
        // Disabled here: streamChat's own timers measure first byte and idle gaps precisely.
        headersTimeout: 0,
        bodyTimeout: 0,
        keepAliveTimeout: 30_000,
        pipelining: 1,
      });
      this.#pools.set(origin, pool);
    }
    return pool;
  }

  /** Closes every pool, aborting calls still running (they were given a grace period before). */
  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((p) => p.destroy()));
  }
}
