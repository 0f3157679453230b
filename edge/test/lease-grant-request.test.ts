import { describe, expect, it } from "vitest";
import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { HeldLease } from "../src/leases/held-lease.ts";
import { demandFor, grantRequest, reportWithGrant } from "../src/leases/grant-request.ts";
import { scopeKey } from "../src/leases/scope-key.ts";

const room = (id: string, resource: LeaseResource): LeaseRoom => ({
  allowanceId: id,
  resource,
  granted: 3n,
  startsInMs: 0n,
  validForMs: 2_000n,
  endsInMs: 0n,
});

/** Valid until 1,990 on the edge's clock, a subscription's budget lending 3 slots, 1 in flight. */
function held(): HeldLease {
  const state: LeaseState = {
    leaseId: "lease-1",
    accountId: "account-1",
    status: LeaseStatus.LEASE_STATUS_OPEN,
    validForMs: 2_000n,
    credit: room("credit", LeaseResource.LEASE_RESOURCE_UNSPECIFIED),
    rooms: [],
    budgets: [
      {
        subscriptionId: "sub-1",
        status: LeaseStatus.LEASE_STATUS_OPEN,
        state: "active",
        terms: undefined,
        rooms: [room("slots", LeaseResource.LEASE_RESOURCE_SLOTS)],
      },
    ],
    keyBudgets: [],
    appliedSequence: 0n,
    limitPerMinute: 60n,
  };
  const lease = new HeldLease(state, "free", 0);
  lease.apply(state, { sequence: 1n, sentAt: 0, receivedAt: 1, marginMs: 10 });
  lease.budgets.get("sub-1")!.rooms[0]!.admitted = 1n;
  return lease;
}

const inHand = { requests: 2n, credit: 300n, tokens: 40n, minCredit: 0n, likelyCredit: 500n };

describe("what a grant says of the account's lease", () => {
  it("says nothing without one", () => {
    expect(reportWithGrant(undefined, 2n, 0, 0)).toEqual({ report: undefined, final: false });
  });

  it("reports a valid lease as it is, not final and not pinned", () => {
    const lease = held();
    const { report, final } = reportWithGrant(lease, 2n, 100, 500);
    expect(final).toBe(false);
    expect(report).toMatchObject({ leaseId: "lease-1", final: false, slotsPinned: false });
    expect(lease.spare(lease.budgets.get("sub-1")!.rooms[0]!)).toBe(2n);
  });

  it("pins the spare slots of a lease past its validity, which it does not make final", () => {
    const lease = held();
    const { report, final } = reportWithGrant(lease, 2n, 5_000, 500);
    expect(final).toBe(false);
    expect(report).toMatchObject({ final: false, slotsPinned: true });
    // Billing may take back the slots beyond the one in flight: none is lent here meanwhile.
    expect(lease.spare(lease.budgets.get("sub-1")!.rooms[0]!)).toBe(0n);
  });

  it("makes final a lease the edge no longer admits on (fenced, or retired)", () => {
    const lease = held();
    lease.open = false;
    const { report, final } = reportWithGrant(lease, 2n, 100, 500);
    expect(final).toBe(true);
    expect(report).toMatchObject({ final: true, slotsPinned: false });
    expect(lease.finalSent).toBe(true);
  });
});

describe("a GrantLease request", () => {
  it("asks for the requests in hand of its scope", () => {
    const request = grantRequest(scopeKey("account-1", { keyId: "k", openProductId: "p" }), "free", inHand, undefined);
    expect(request).toMatchObject({
      accountId: "account-1",
      tier: "free",
      request: { creditMicros: 300n, requests: 2n, tokens: 40n, subscriptionId: "", keyId: "k", openProductId: "p" },
      minCreditMicros: 0n,
    });
  });

  it("sizes by the lease's measured demand, its credit at least the likely worst case", () => {
    expect(demandFor(undefined, inHand, "")).toEqual({
      creditMicros: 500n,
      requests: 2n,
      tokens: 0n,
      subscriptionId: "",
      keyId: "",
    });
    const lease = held();
    lease.demand = { credit: 9_000n, requests: 3n };
    const report = lease.report(false, 1_000, 2n);
    expect(demandFor(report, inHand, "")).toMatchObject({ creditMicros: 9_000n, requests: 3n });
  });

  it("sizes a subscription's grant by its budget's demand, or the requests in hand", () => {
    const lease = held();
    lease.budgets.get("sub-1")!.demand = { requests: 4n, tokens: 800n };
    const report = lease.report(false, 1_000, 2n);
    expect(demandFor(report, inHand, "sub-1")).toMatchObject({ requests: 4n, tokens: 800n, subscriptionId: "sub-1" });
    expect(demandFor(undefined, inHand, "sub-1")).toMatchObject({ requests: 2n, tokens: 40n, subscriptionId: "sub-1" });
  });
});
