/**
 * Which of an account's allowances a grant is for: the account's own, one subscription's budget or
 * an open endpoint's plan, each per API key. Grants in flight and cached refusals are kept per
 * scope, so one key's spend limit or one plan's refusal never holds up another's.
 */
export interface ScopeKey {
  readonly accountId: string;
  /** The subscription of a scoped key ('' for the account's own allowance or an open plan). */
  readonly subscriptionId: string;
  /** An account key's request to an open endpoint: the plan admitting it ('' for none). */
  readonly openProductId: string;
  /** The API key: a spend-limited key has room of its own ('' for none). */
  readonly keyId: string;
}

/** The scope of a request; a subscription's key is admitted on its own budget, never an open plan. */
export function scopeKey(
  accountId: string,
  on: { subscriptionId?: string; openProductId?: string; keyId?: string } = {},
): ScopeKey {
  const subscriptionId = on.subscriptionId ?? "";
  return {
    accountId,
    subscriptionId,
    openProductId: subscriptionId ? "" : (on.openProductId ?? ""),
    keyId: on.keyId ?? "",
  };
}

export function sameScope(a: ScopeKey, b: ScopeKey): boolean {
  return (
    a.accountId === b.accountId &&
    a.subscriptionId === b.subscriptionId &&
    a.openProductId === b.openProductId &&
    a.keyId === b.keyId
  );
}

/**
 * Whether a recall of the account's lease (`subscriptionId` '') or of one subscription's budget in
 * it concerns this scope: billing changed what it would answer there.
 */
export function recallConcerns(key: ScopeKey, accountId: string, subscriptionId: string): boolean {
  return key.accountId === accountId && (!subscriptionId || key.subscriptionId === subscriptionId);
}

/**
 * Values by scope. An account has a handful of scopes in use at most, so each account's are a
 * short list compared field by field, and "any of this account's" is one map lookup.
 */
export class ScopeMap<V> {
  readonly #byAccount = new Map<string, Array<{ key: ScopeKey; value: V }>>();

  get size(): number {
    let n = 0;
    for (const entries of this.#byAccount.values()) n += entries.length;
    return n;
  }

  get(key: ScopeKey): V | undefined {
    return this.#byAccount.get(key.accountId)?.find((e) => sameScope(e.key, key))?.value;
  }

  set(key: ScopeKey, value: V): void {
    const entries = this.#byAccount.get(key.accountId);
    const entry = entries?.find((e) => sameScope(e.key, key));
    if (entry) entry.value = value;
    else if (entries) entries.push({ key, value });
    else this.#byAccount.set(key.accountId, [{ key, value }]);
  }

  /** Deletes the scope's value, or only when it is still `value` (a newer one stays). */
  delete(key: ScopeKey, value?: V): void {
    const entries = this.#byAccount.get(key.accountId);
    const i = entries?.findIndex((e) => sameScope(e.key, key) && (value === undefined || e.value === value)) ?? -1;
    if (!entries || i < 0) return;
    entries.splice(i, 1);
    if (entries.length === 0) this.#byAccount.delete(key.accountId);
  }

  /** Whether any scope of the account has a value. */
  hasAccount(accountId: string): boolean {
    return this.#byAccount.has(accountId);
  }

  deleteWhere(drop: (key: ScopeKey, value: V) => boolean): void {
    for (const [accountId, entries] of this.#byAccount) {
      const kept = entries.filter((e) => !drop(e.key, e.value));
      if (kept.length === 0) this.#byAccount.delete(accountId);
      else if (kept.length < entries.length) this.#byAccount.set(accountId, kept);
    }
  }
}
