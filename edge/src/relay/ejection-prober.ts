import type { Dispatcher } from "undici";
import type { Logger } from "@mkt/runtime/logger";
import type { Route } from "@mkt/proto/registry/v1/registry";
import type { UpstreamDirectory, UpstreamTarget } from "../routing/upstream-target.ts";
import { checkHealth, checkModels } from "@mkt/runtime/server-checks";
import type { OutlierTracker } from "./outlier-tracker.ts";

/** The first probe's delay after the one made at once, doubled after each failure up to the cap. */
const FIRST_RETRY_MS = 250;
/** An upstream back from a restart takes traffic again within a second or so (docs/adr/0027-dependency-outage-is-503.md). */
const MAX_RETRY_MS = 1_000;

export interface EjectionProberOptions {
  upstreams: UpstreamDirectory;
  outliers: Pick<OutlierTracker, "isEjected" | "recovered">;
  /** The connection pool (platform) or guarded agent (hoster) a probe of `target` goes through. */
  dispatcherFor(target: UpstreamTarget): Dispatcher;
  /** Limit of one probe call. */
  timeoutMs: number;
  log: Logger;
}

/**
 * Brings back the upstreams of a model that has none left. Outlier ejection keeps traffic off a
 * failing server for its back-off (30 s and more), which is right while another server takes the
 * model's calls; but when every server of a model is ejected, the model answers
 * no_healthy_upstream until a back-off ends, long after its only server (the local model,
 * restarted) is back. So once a route has no live upstream, each of its ejected servers is probed
 * at once and then every 250 ms, 500 ms, 1 s, 1 s, ... (GET /v1/models with its token, listing its
 * model, after GET /health for a hoster: what the health prober checks, never a billed chat
 * call) until one answers; that one takes
 * calls again at once (on probation: its first live failure ejects it again). Probing stops when
 * the ejection ends by itself or the prober closes.
 */
export class EjectionProber {
  readonly #options: EjectionProberOptions;
  readonly #watched = new Set<string>();
  readonly #closed = new AbortController();
  readonly #loops = new Set<Promise<void>>();

  constructor(options: EjectionProberOptions) {
    this.#options = options;
  }

  /** Called when `route`'s upstream was just ejected: probes its servers if none is left. */
  async ejected(route: Route): Promise<void> {
    const { upstreams, outliers } = this.#options;
    const all = upstreams.candidatesFor(route);
    if (all.some((t) => !outliers.isEjected(t.key))) return;
    for (const target of all) this.#watch(target);
  }

  #watch(target: UpstreamTarget): void {
    if (this.#watched.has(target.key) || this.#closed.signal.aborted) return;
    this.#watched.add(target.key);
    const loop = this.#probeUntilBack(target).finally(() => {
      this.#watched.delete(target.key);
      this.#loops.delete(loop);
    });
    this.#loops.add(loop);
  }

  async #probeUntilBack(target: UpstreamTarget): Promise<void> {
    const { outliers, log } = this.#options;
    for (let wait = FIRST_RETRY_MS; ; wait = Math.min(wait * 2, MAX_RETRY_MS)) {
      if (this.#closed.signal.aborted || !outliers.isEjected(target.key)) return;
      if (await this.#answers(target)) {
        outliers.recovered(target.key);
        log.info({ upstream: target.key }, "ejected upstream answers again; it takes calls");
        return;
      }
      await this.#sleep(wait);
    }
  }

  #sleep(ms: number): Promise<void> {
    const signal = this.#closed.signal;
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  async #answers(target: UpstreamTarget): Promise<boolean> {
    const { dispatcherFor, timeoutMs } = this.#options;
    const endpoint = new URL(target.baseUrl);
    const settings = { agent: dispatcherFor(target), timeoutMs };
    try {
      // A hoster's server is probed as the health prober does (its contract has /health); the
      // operator's OpenAI-compatible servers need not have one.
      if (target.trust === "hoster") await checkHealth(endpoint, settings);
      await checkModels(endpoint, target.token, [target.upstreamModel], settings);
      return true;
    } catch {
      return false;
    }
  }

  /** Stops probing and waits for the probes in flight. */
  async close(): Promise<void> {
    this.#closed.abort();
    await Promise.allSettled([...this.#loops]);
  }
}
