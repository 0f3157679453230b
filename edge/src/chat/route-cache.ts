import type { Route } from "@mkt/proto/registry/v1/registry";

/** A scoped key's confinement (accounts' KeyScope, registry's RouteScope). */
type Scope = { subscriptionId: string; productId: string; hosterId: string };

interface Entry {
  route: Route;
  /** The hoster a `catalog.changed` naming it drops this entry for ('' for platform routes). */
  hosterId: string;
  expiresAt: number;
}

/**
 * Resolved routes, kept for `ttlMs` so the hot path skips the ResolveRoute round trip
 * (DESIGN.md §2). Registry announces every change that can alter a route (`catalog.changed`,
 * followed by catalog-changes.ts), which drops the routes it concerns at once; the TTL only
 * bounds how long a lost announcement can matter. While that feed is down the cache is off
 * (every call asks registry), as announcements sent meanwhile are lost. Prices never change
 * under a route either way, and registry checks the route's servers again when it relays.
 * Only successful lookups are kept, so a model that appears is callable at once.
 */
export class RouteCache {
  readonly #entries = new Map<string, Entry>();
  readonly #pending = new Map<string, Promise<Route | undefined>>();
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  #enabled = false;
  /** Bumped by every drop; a lookup that overlapped one may be stale and is not remembered. */
  #generation = 0;

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
    if (this.#ttlMs === 0 || !this.#enabled) return resolve();
    const key = scope ? `${scope.subscriptionId}/${scope.productId}/${scope.hosterId}/${model}` : `-/${model}`;
    const entry = this.#entries.get(key);
    if (entry && entry.expiresAt > Date.now()) return entry.route;
    const pending = this.#pending.get(key);
    if (pending) return pending;
    const generation = this.#generation;
    const lookup: Promise<Route | undefined> = resolve().finally(() => {
      if (this.#pending.get(key) === lookup) this.#pending.delete(key);
    });
    this.#pending.set(key, lookup);
    const route = await lookup;
    if (route && this.#enabled && generation === this.#generation) {
      if (this.#entries.size >= this.#maxEntries) this.#entries.delete(this.#entries.keys().next().value!);
      const hosterId = (scope?.hosterId || route.hosterId).toLowerCase();
      this.#entries.set(key, { route, hosterId, expiresAt: Date.now() + this.#ttlMs });
    }
    return route;
  }

  /** Drops the routes of one hoster, or every route for ''. */
  drop(hosterId: string): void {
    this.#generation++;
    // Requests after the change must not join a lookup made before it.
    this.#pending.clear();
    const id = hosterId.toLowerCase();
    if (id === "") {
      this.#entries.clear();
      return;
    }
    for (const [key, entry] of this.#entries) if (entry.hosterId === id) this.#entries.delete(key);
  }

  /** Drops everything and, while the catalog.changed feed is down, stops caching. */
  setEnabled(enabled: boolean): void {
    this.#enabled = enabled;
    this.drop("");
  }
}
