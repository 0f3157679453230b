import { createHash } from "node:crypto";
import type { Principal } from "@mkt/proto/accounts/v1/accounts";

/** Accounts' PRINCIPAL_TTL_MS default: the TTL before its first reply, and of a reply without one. */
export const DEFAULT_PRINCIPAL_TTL_MS = 2_000;

/** Accounts' RevalidateKeys takes at most this many key ids per call; more go in several calls. */
const MAX_KEYS_PER_CALL = 10_000;

interface Entry {
  principal: Principal;
  /** Monotonic ms: the last successful check's send time + TTL − margin. */
  validUntil: number;
  /** Monotonic ms of the last request served with it (or of its lookup). */
  lastUsedAt: number;
}

export interface PrincipalCacheOptions {
  /**
   * How long one successful check lets a principal be used until accounts' first reply says
   * (its PRINCIPAL_TTL_MS, in every Authenticate and RevalidateKeys reply: `trustFor`); accounts'
   * default when omitted.
   */
  ttlMs?: number;
  /**
   * The edge process's id, sent with every check: accounts records this edge as holding the key,
   * and a revocation waits for its ack (docs/adr/0018-revocation-waits-for-the-edges.md). ''
   * records nothing.
   */
  edgeId?: string;
  /** The edge's monotonic clock in ms (performance.now by default; tests may move it). */
  now?: () => number;
  maxEntries?: number;
}

/**
 * Principals by API key, so the hot path skips the Authenticate round trip
 * (docs/architecture.md#authentication). Entries are keyed by the key's SHA-256, so no secret sits
 * in the map. A principal is used only until its last successful check's send time + TTL − margin
 * (Authenticate, then `revalidate` while in use); `keys.revoked` drops it at once; an entry unused
 * for two TTLs is dropped rather than revalidated; and while the revocation feed (NATS) is down,
 * nothing is served from memory once one TTL has passed since it went down, since revocations sent
 * meanwhile are lost.
 */
export class PrincipalCache {
  readonly edgeId: string;
  #ttlMs: number;
  #onTtlChange: (() => void) | undefined;
  readonly #now: () => number;
  readonly #maxEntries: number;
  readonly #entries = new Map<string, Entry>();
  readonly #byKeyId = new Map<string, string>();
  readonly #pending = new Map<string, Promise<Principal>>();
  /** Up to when the revocation feed lets memory answer: never until it is followed, forever while it is up. */
  #feedTrustedUntil = -Infinity;
  /** Bumped by every revocation and flush; a lookup that overlapped one is not remembered. */
  #generation = 0;

  constructor(options: PrincipalCacheOptions) {
    this.#ttlMs = options.ttlMs ?? DEFAULT_PRINCIPAL_TTL_MS;
    this.edgeId = options.edgeId ?? "";
    this.#now = options.now ?? (() => performance.now());
    this.#maxEntries = options.maxEntries ?? 100_000;
  }

  /** Accounts' PRINCIPAL_TTL_MS, as its latest reply gave it. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /** Like the lease table's: room for the check's reply to have been delayed on the way. */
  get marginMs(): number {
    return Math.max(10, Math.floor(this.#ttlMs / 10));
  }

  /**
   * Accounts' reply said how long its principals may be used (0: an accounts from before it said
   * so, which had the default). Called by `authenticate` and `revalidate`'s check before they
   * return, so what they answer is kept for that long.
   */
  trustFor(principalTtlMs: number): void {
    const ttlMs = principalTtlMs > 0 ? principalTtlMs : DEFAULT_PRINCIPAL_TTL_MS;
    if (ttlMs === this.#ttlMs) return;
    this.#ttlMs = ttlMs;
    this.#onTtlChange?.();
  }

  /** Called when accounts' TTL changes (the revalidation loop re-times its next check). */
  onTtlChange(listener: (() => void) | undefined): void {
    this.#onTtlChange = listener;
  }

  /** Returns the key's principal, calling `authenticate` at most once per key at a time. */
  async get(apiKey: string, authenticate: () => Promise<Principal>): Promise<Principal> {
    const hash = createHash("sha256").update(apiKey).digest("hex");
    const now = this.#now();
    const entry = this.#entries.get(hash);
    if (entry && now < Math.min(entry.validUntil, this.#feedTrustedUntil)) {
      entry.lastUsedAt = now;
      return entry.principal;
    }
    const pending = this.#pending.get(hash);
    if (pending) return pending;
    const generation = this.#generation;
    const lookup: Promise<Principal> = authenticate()
      .then((principal) => {
        // A revocation that arrived while the lookup ran may concern this very key: answer this
        // request, but do not keep an answer that may already be stale.
        if (generation === this.#generation) this.#remember(hash, principal, now);
        return principal;
      })
      .finally(() => {
        if (this.#pending.get(hash) === lookup) this.#pending.delete(hash);
      });
    this.#pending.set(hash, lookup);
    return lookup;
  }

  /**
   * Re-checks every principal in use with `check` (accounts.RevalidateKeys): one call for all of
   * them (more only past 10,000 keys). A key `check` leaves out is dropped; the others may be used
   * until this call's send time + TTL − margin. Entries unused for two TTLs are dropped first,
   * unchecked. A failed call changes nothing: its principals lapse at their own deadline.
   */
  async revalidate(check: (keyIds: string[]) => Promise<Principal[]>): Promise<void> {
    const sentAt = this.#now();
    const inUse = new Map<string, Entry>();
    for (const [hash, entry] of this.#entries) {
      if (sentAt - entry.lastUsedAt > 2 * this.ttlMs) this.#forget(hash);
      else inUse.set(entry.principal.keyId, entry);
    }
    const keyIds = [...inUse.keys()];
    const batches: string[][] = [];
    for (let i = 0; i < keyIds.length; i += MAX_KEYS_PER_CALL) batches.push(keyIds.slice(i, i + MAX_KEYS_PER_CALL));
    const answers = await Promise.all(batches.map((ids) => check(ids)));
    const live = new Map(answers.flat().map((principal) => [principal.keyId, principal]));
    for (const [keyId, entry] of inUse) {
      const hash = this.#byKeyId.get(keyId);
      // Revoked, replaced or evicted while the call ran: what the answer says is about an entry gone.
      if (hash === undefined || this.#entries.get(hash) !== entry) continue;
      const principal = live.get(keyId);
      if (!principal) {
        this.#forget(hash);
        continue;
      }
      entry.principal = principal;
      entry.validUntil = Math.max(entry.validUntil, sentAt + this.ttlMs - this.marginMs);
    }
  }

  #remember(hash: string, principal: Principal, sentAt: number): void {
    this.#forget(hash); // re-insert: Map order is the eviction order
    if (this.#entries.size >= this.#maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest !== undefined) this.#forget(oldest);
    }
    this.#entries.set(hash, { principal, validUntil: sentAt + this.ttlMs - this.marginMs, lastUsedAt: this.#now() });
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

  /**
   * The revocation feed's state (cache-invalidations.ts). Up: memory answers again, starting
   * empty, since revocations sent while it was down were lost. Down: memory answers for one
   * more TTL at most (the reconnect usually comes first); a cache never followed answers nothing.
   */
  setEnabled(enabled: boolean): void {
    if (enabled) {
      this.clear();
      this.#feedTrustedUntil = Infinity;
    } else if (this.#feedTrustedUntil === Infinity) {
      this.#feedTrustedUntil = this.#now() + this.ttlMs;
    }
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
