import type { Route } from "@mkt/proto/registry/v1/registry";

/** A scoped key's confinement (accounts' KeyScope, registry's RouteScope). */
type Scope = { subscriptionId: string; productId: string; hosterId: string };

interface Entry {
  route: Route;
  expiresAt: number;
}

/**
 * Resolved routes, kept for `ttlMs` so the hot path skips the ResolveRoute round trip
 * (DESIGN.md §2). Staleness is bounded and harmless: a route's prices never change under it
 * (platform prices are configuration; a subscription's are snapshotted by billing), and registry
 * checks the route's servers again when it relays (a model gone or unhealthy since is a 503).
 * Only successful lookups are kept, so a model that appears is callable at once.
 */
export class RouteCache {
  readonly #entries = new Map<string, Entry>();
  readonly #pending = new Map<string, Promise<Route | undefined>>();
  readonly #ttlMs: number;
  readonly #maxEntries: number;

  constructor(ttlMs: number, maxEntries = 10_000) {
    this.#ttlMs = ttlMs;
    this.#maxEntries = maxEntries;
  }

  /** The route for `model` in `scope`, calling `resolve` at most once per key at a time. */
  async get(
    model: string,
    scope: Scope | undefined,
    resolve: () => Promise<Route | undefined>,
  ): Promise<Route | undefined> {
    if (this.#ttlMs === 0) return resolve();
    const key = scope ? `${scope.subscriptionId}/${scope.productId}/${scope.hosterId}/${model}` : `-/${model}`;
    const entry = this.#entries.get(key);
    if (entry && entry.expiresAt > Date.now()) return entry.route;
    const pending = this.#pending.get(key);
    if (pending) return pending;
    const lookup = resolve().finally(() => this.#pending.delete(key));
    this.#pending.set(key, lookup);
    const route = await lookup;
    if (route) {
      if (this.#entries.size >= this.#maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
      this.#entries.set(key, { route, expiresAt: Date.now() + this.#ttlMs });
    }
    return route;
  }
}
