import { Pool } from "undici";
import type { UpstreamTrust } from "../routing/upstream-target.ts";
import { guardedConnect } from "@mkt/runtime/hoster-connector";

export interface UpstreamPoolsOptions {
  connectTimeoutMs: number;
  /** ALLOW_PRIVATE_UPSTREAMS: lifts the address check of guarded pools (tests, local demos). */
  allowPrivate: boolean;
}

/**
 * One keep-alive connection pool per upstream origin and trust, shared by every call to it.
 * `platform` pools call servers the operator configured (the local model server) as they are;
 * `hoster` pools call third-party servers through the guarded connector (hoster-agent.ts), which
 * refuses private and metadata addresses on every new connection. The trust is part of the key,
 * so a hoster endpoint that names the same origin as a platform server never shares its pool.
 * Timeouts on the body and headers are enforced per call by the upstream client (which knows
 * the phases); the pool only bounds how long a TCP/TLS connect may take.
 */
export class UpstreamPools {
  readonly #pools = new Map<string, Pool>();
  readonly #options: UpstreamPoolsOptions;

  constructor(options: UpstreamPoolsOptions) {
    this.#options = options;
  }

  get(origin: string, trust: UpstreamTrust): Pool {
    const key = `${trust} ${origin}`;
    let pool = this.#pools.get(key);
    if (!pool) {
      const timeout = this.#options.connectTimeoutMs;
      pool = new Pool(origin, {
        connect:
          trust === "hoster"
            ? guardedConnect({ allowPrivate: this.#options.allowPrivate, connectTimeoutMs: timeout })
            : { timeout },
        // Disabled here: streamChat's own timers measure first byte and idle gaps precisely.
        headersTimeout: 0,
        bodyTimeout: 0,
        keepAliveTimeout: 30_000,
        pipelining: 1,
      });
      this.#pools.set(key, pool);
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
