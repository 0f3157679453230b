import { createHash } from "node:crypto";
import type { Principal } from "@mkt/proto/accounts/v1/accounts";

interface Entry {
  principal: Principal;
  expiresAt: number;
}

/**
 * Principals by API key, kept briefly so the hot path skips the Authenticate round trip
 * (DESIGN.md §2). Entries are keyed by the key's SHA-256, so no secret sits in the map; they expire
 * after `ttlMs`, are dropped at once when `keys.revoked` names their key, and the whole cache is
 * bypassed while the revocation feed is down (a revocation could be missed then).
 */
export class PrincipalCache {
  readonly #entries = new Map<string, Entry>();
  readonly #byKeyId = new Map<string, string>();
  readonly #pending = new Map<string, Promise<Principal>>();
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  #enabled = false;
  /** Bumped by every revocation and flush; a lookup that overlapped one is not remembered. */
  #generation = 0;

  constructor(ttlMs: number, maxEntries = 100_000) {
    this.#ttlMs = ttlMs;
    this.#maxEntries = maxEntries;
  }

  /** Returns the key's principal, calling `authenticate` at most once per key at a time. */
  async get(apiKey: string, authenticate: () => Promise<Principal>): Promise<Principal> {
    const hash = createHash("sha256").update(apiKey).digest("hex");
    const entry = this.#entries.get(hash);
    if (entry && this.#enabled && entry.expiresAt > Date.now()) return entry.principal;
    const pending = this.#pending.get(hash);
    if (pending) return pending;
    const generation = this.#generation;
    const lookup: Promise<Principal> = authenticate().finally(() => {
      if (this.#pending.get(hash) === lookup) this.#pending.delete(hash);
    });
    this.#pending.set(hash, lookup);
    const principal = await lookup;
    // A revocation that arrived while the lookup ran may concern this very key: answer this
    // request, but do not keep an answer that may already be stale.
    if (this.#enabled && generation === this.#generation) this.#remember(hash, principal);
    return principal;
  }

  #remember(hash: string, principal: Principal): void {
    if (this.#ttlMs === 0) return;
    if (this.#entries.size >= this.#maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#forget(oldest);
    }
    this.#entries.delete(hash); // re-insert: Map order is the eviction order
    this.#entries.set(hash, { principal, expiresAt: Date.now() + this.#ttlMs });
    this.#byKeyId.set(principal.keyId, hash);
  }

  #forget(hash: string): void {
    const entry = this.#entries.get(hash);
    if (entry) this.#byKeyId.delete(entry.principal.keyId);
    this.#entries.delete(hash);
  }

  /** Drops the principal of a revoked key. */
  revoke(keyId: string): void {
    this.#generation++;
    this.#pending.clear(); // requests after the revocation must not join a lookup made before it
    const hash = this.#byKeyId.get(keyId);
    if (hash !== undefined) this.#forget(hash);
  }

  /** Drops everything and, while the revocation feed is down, stops caching (every call re-checks). */
  setEnabled(enabled: boolean): void {
    this.#enabled = enabled;
    this.clear();
  }

  clear(): void {
    this.#generation++;
    this.#pending.clear();
    this.#entries.clear();
    this.#byKeyId.clear();
  }

  get size(): number {
    return this.#entries.size;
  }
}
