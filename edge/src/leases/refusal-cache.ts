import type { AppError } from "@mkt/runtime/errors";
import { creditNeeded, type InHand } from "./admission-need.ts";
import { recallConcerns, ScopeMap, type ScopeKey } from "./scope-key.ts";

/** Billing refused a grant: the account (or key, or plan) cannot cover it now. */
export const isRefusal = (error: AppError) => error.httpStatus === 402 || error.httpStatus === 429;

interface Refusal {
  error: AppError;
  /** The refused grant's send time (the edge's monotonic ms). */
  at: number;
  /** The credit it asked for: a 402 answers only requests needing at least as much. */
  credit: bigint;
}

/**
 * Billing's 402s and 429s, per scope, answered by the edge itself so that a client with no credit
 * cannot make every request a grant (and every grant a recall of other edges' room). A refusal
 * holds until the next heartbeat reply sent after it, a recall of its account or subscription, or
 * one TTL, whichever comes first: a top-up while heartbeats fail (a busy billing) must not leave
 * the account refused on a stale answer, so past a TTL its next request asks billing again.
 */
export class RefusalCache {
  /** Billing's LEASE_TTL_MS as the edge now has it (it follows billing's replies). */
  readonly #ttlMs: () => number;
  readonly #refused = new ScopeMap<Refusal>();

  constructor(ttlMs: number | (() => number)) {
    this.#ttlMs = typeof ttlMs === "number" ? () => ttlMs : ttlMs;
  }

  get size(): number {
    return this.#refused.size;
  }

  /**
   * A grant for the requests in hand, sent at `sentAt`, was refused. Only a grant for one request
   * is remembered (the caller's to decide): a batch's refusal says nothing of each request alone.
   */
  remember(key: ScopeKey, error: AppError, sentAt: number, inHand: InHand): void {
    this.#refused.set(key, { error, at: sentAt, credit: creditNeeded(inHand) });
  }

  /** The cached refusal that answers this request without asking billing, if any. */
  refusing(key: ScopeKey, inHand: InHand, now: number): AppError | undefined {
    const refusal = this.#refused.get(key);
    if (!refusal || now - refusal.at >= this.#ttlMs() || !refuses(refusal, inHand)) return undefined;
    return refusal.error;
  }

  /** A heartbeat sent at `sentAt` was answered: billing's view then covers every older refusal. */
  liftBefore(sentAt: number): void {
    this.#refused.deleteWhere((_, refusal) => refusal.at < sentAt);
  }

  /** A recall: billing changed what it would answer for the account, or for one subscription. */
  liftOnRecall(accountId: string, subscriptionId: string): void {
    this.#refused.deleteWhere((key) => recallConcerns(key, accountId, subscriptionId));
  }
}

/**
 * Whether a refusal answers this request too: a rate-limit refusal never stops step two, whose
 * request is already counted (it asks for credit alone); a 402 for credit or a key's limit answers
 * only requests needing at least the credit that was refused, so a large request's 402 does not
 * refuse the small ones the balance still pays (and each refusal billing gives lowers the bar).
 */
function refuses(refusal: Refusal, inHand: InHand): boolean {
  if (refusal.error.httpStatus === 429) return inHand.requests > 0n;
  if (refusal.error.code === "insufficient_credits" || refusal.error.code === "key_limit_exceeded") {
    return creditNeeded(inHand) >= refusal.credit;
  }
  return true;
}
