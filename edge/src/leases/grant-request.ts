import type { GrantLeaseRequest, LeaseNeed, LeaseReport } from "@mkt/proto/billing/v1/leases";
import type { InHand } from "./admission-need.ts";
import type { HeldLease } from "./held-lease.ts";
import type { ScopeKey } from "./scope-key.ts";

/**
 * How long a cold request waits for its GrantLease before it is answered 503. A grant waits on the
 * account's lock behind other grants and a bounded recall: under load that takes longer than one
 * TTL, and a request waiting for it is better served late than refused.
 */
export const GRANT_TIMEOUT_MS = 10_000;

/**
 * What a grant says of the lease the edge holds for the account (`held`: the one in use, else a
 * retired one billing may still hold open), in the grant's own report.
 *
 * A lease billing fenced, or one the edge retired, goes final (billing then makes a new one; a
 * retired lease not reported final could be answered again, and the edge cannot admit on it). One
 * merely past its validity (a slow heartbeat) does not: the grant's reply renews it if billing
 * still holds it open, or says it is fenced (the session lapsed). Reporting it final would close
 * it and make a new lease per slow heartbeat, each granted afresh: under load that churn is what
 * kept billing slow. Its slots are pinned to the report instead (it admits nothing until a reply
 * anyway), so billing may take back the ones lent beyond those in flight when it fences it;
 * otherwise they would keep the subscription's next grant at its limit.
 */
export function reportWithGrant(
  held: HeldLease | undefined,
  sequence: bigint,
  sentAt: number,
  elapsedMs: number,
): { report: LeaseReport | undefined; final: boolean } {
  if (!held) return { report: undefined, final: false };
  const final = !held.open;
  const pinned = !final && !held.usable(sentAt);
  if (pinned) held.pin(sequence);
  return { report: { ...held.report(final, elapsedMs, sequence), slotsPinned: pinned }, final };
}

/** The GrantLease for the requests in hand of one scope (the caller adds who calls, and the sequence). */
export function grantRequest(
  key: ScopeKey,
  tier: string,
  inHand: InHand,
  report: LeaseReport | undefined,
): Omit<GrantLeaseRequest, "edgeId" | "incarnation" | "bootId" | "sequence"> {
  const { accountId, subscriptionId, keyId, openProductId } = key;
  return {
    accountId,
    tier,
    request: {
      creditMicros: inHand.credit,
      requests: inHand.requests,
      tokens: inHand.tokens,
      subscriptionId,
      keyId,
      openProductId,
    },
    demandPerSecond: demandFor(report, inHand, subscriptionId),
    report,
    minCreditMicros: inHand.minCredit,
  };
}

/**
 * The demand a GrantLease sizes by: the lease's as last measured (or the request in hand when
 * the edge has none), its credit at least the likely worst case of the requests in hand, and for
 * a subscription's request its budget's tokens, which billing reads when `subscription_id` names
 * the budget it grows (so a warm subscriber gets room ahead too).
 */
export function demandFor(report: LeaseReport | undefined, inHand: InHand, subscriptionId: string): LeaseNeed {
  const measured = report?.demandPerSecond ?? { creditMicros: inHand.credit, requests: inHand.requests, tokens: 0n };
  const credit = measured.creditMicros > inHand.likelyCredit ? measured.creditMicros : inHand.likelyCredit;
  const account = { ...measured, creditMicros: credit };
  if (!subscriptionId) return { ...account, tokens: 0n, subscriptionId: "", keyId: "" };
  const budget = report?.budgetDemand.find((d) => d.subscriptionId === subscriptionId);
  return {
    creditMicros: account.creditMicros,
    requests: budget?.requests ?? inHand.requests,
    tokens: budget?.tokens ?? inHand.tokens,
    subscriptionId,
    keyId: "",
  };
}
