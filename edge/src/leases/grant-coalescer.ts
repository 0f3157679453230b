import type { InHand } from "./admission-need.ts";
import { ScopeMap, type ScopeKey } from "./scope-key.ts";

/**
 * One GrantLease of a scope and the requests it is for: while `joinable`, requests of the scope
 * running short add what they need to `inHand`, so a cold burst makes one grant sized for all of
 * them (the `w` of the sizing rule is their sum) instead of one each.
 */
export interface GrantBatch<R> {
  readonly inHand: InHand;
  members: number;
  joinable: boolean;
  readonly done: Promise<R>;
}

/** Sends one grant for the batch's requests in hand (`members` of them). */
export type SendGrant<R> = (inHand: InHand, members: number) => Promise<R>;

/**
 * At most one GrantLease in flight per scope, shared by the requests that run short while it is
 * being made. A request that must ask alone (it may shrink to what the account has, or its shared
 * grant was refused) never joins one, and one that cannot join waits for it and looks again.
 */
export class GrantCoalescer<R> {
  readonly #granting = new ScopeMap<GrantBatch<R>>();

  /**
   * What a request short of room does: join the scope's grant in flight or start one (`batch`,
   * to await), or wait for a grant it cannot join and look at its lease again (`wait`): that
   * grant's refusal is its own (a step one refused 429 says nothing of a step two's credit), and
   * a refusal that applies to this request is cached by the time it resolves.
   */
  next(
    key: ScopeKey,
    inHand: InHand,
    alone: boolean,
    send: SendGrant<R>,
  ): { batch: GrantBatch<R> } | { wait: Promise<void> } {
    const pending = this.#granting.get(key);
    if (pending && !(pending.joinable && !alone)) return { wait: pending.done.then(noop, noop) };
    if (!pending) return { batch: this.#start(key, inHand, !alone, send) };
    pending.members += 1;
    pending.inHand.requests += inHand.requests;
    pending.inHand.credit += inHand.credit;
    pending.inHand.tokens += inHand.tokens;
    pending.inHand.likelyCredit += inHand.likelyCredit;
    return { batch: pending };
  }

  /** Whether a grant of any of the account's scopes is in flight (its reply may still change the lease). */
  grantingFor(accountId: string): boolean {
    return this.#granting.hasAccount(accountId);
  }

  /**
   * When `joinable`, the call goes out after this turn of the event loop: the other requests of
   * the scope that run short meanwhile (a burst on a cold account, all waiting on one
   * authentication) join it instead of each making one; a turn costs microseconds against the
   * grant's round trip.
   */
  #start(key: ScopeKey, inHand: InHand, joinable: boolean, send: SendGrant<R>): GrantBatch<R> {
    const started = { inHand: { ...inHand }, members: 1, joinable };
    const done = (async () => {
      if (joinable) await new Promise((resolve) => setImmediate(resolve));
      started.joinable = false;
      return send(started.inHand, started.members);
    })().finally(() => this.#granting.delete(key, batch));
    const batch: GrantBatch<R> = Object.assign(started, { done });
    this.#granting.set(key, batch);
    return batch;
  }
}

const noop = () => undefined;
