import type { HeldLease } from "./held-lease.ts";

/** What the request in hand is, for the account's lease. */
export interface AdmitNeed {
  accountId: string;
  tier: string;
  /** The subscription of a scoped key ('' for an account key). */
  subscriptionId?: string;
  /**
   * An account key's request to an open endpoint: the plan whose budget (of the account's
   * subscription to it, made by billing on first use) admits it.
   */
  openProductId?: string;
  /** The API key the request is made with: a spend-limited key's room is taken too ('' for none). */
  keyId?: string;
  /**
   * What the worst case is known to be at least before the prompt is counted (the output cap × n
   * at the route's price, and those tokens): a cold request asks for it in the same GrantLease,
   * so it makes one round trip, not a second one for its worst case.
   */
  atLeast?: { credit: bigint; tokens: bigint };
  /**
   * The credit its worst case is likely to take (a request without max_tokens: at the model's
   * output cap), for a cold grant's sizing only: the grant lends that much ahead when the account
   * has it, so step two is admitted from memory, but covers no more than `atLeast` (an account
   * that cannot pay the model's cap is served a smaller one, against the whole account).
   */
  likelyCredit?: bigint;
}

/** A request's worst case: credit (micro-USD), tokens, and the output cap per choice it means. */
export interface WorstCase {
  credit: bigint;
  tokens: bigint;
  maxOutputTokens: bigint;
}

/**
 * A worst case that depends on the lease it is taken on: an overage plan's credit is the part of
 * its tokens the budget's included room does not cover.
 */
export type WorstCaseOn = (lease: HeldLease) => WorstCase;

/** How a request without max_tokens fits what the account has (see LeaseTable.takeWorstCase). */
export interface FitToCredit {
  /** The least credit it can be served with (the prompt and one output token per choice). */
  min: bigint;
  /** The worst case that `spareCredit` pays for, or undefined when it pays for none. */
  shrink(spareCredit: bigint): WorstCase | undefined;
}

/** What the requests in hand ask of a grant (GrantLease's request and min_credit_micros). */
export interface InHand {
  requests: bigint;
  credit: bigint;
  tokens: bigint;
  minCredit: bigint;
  /** AdmitNeed.likelyCredit: demand for sizing, not cover (0 when not known). */
  likelyCredit: bigint;
}

/** The least credit the requests in hand can be served with (a request without max_tokens shrinks). */
export const creditNeeded = (inHand: InHand) => (inHand.minCredit > 0n ? inHand.minCredit : inHand.credit);
