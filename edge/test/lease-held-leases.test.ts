import { describe, expect, it } from "vitest";
import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { FORGET_CLOSED_MS, HeldLeases } from "../src/leases/held-leases.ts";

const room = (id: string, resource: LeaseResource): LeaseRoom => ({
  allowanceId: id,
  resource,
  granted: 10n,
  startsInMs: 0n,
  validForMs: 2_000n,
  endsInMs: 0n,
});

function state(
  leaseId: string,
  status: LeaseStatus = LeaseStatus.LEASE_STATUS_OPEN,
  accountId = "account-1",
): LeaseState {
  return {
    leaseId,
    accountId,
    status,
    validForMs: 2_000n,
    credit: room(`${leaseId}-credit`, LeaseResource.LEASE_RESOURCE_UNSPECIFIED),
    rooms: [],
    budgets: [
      {
        subscriptionId: "sub-1",
        status: LeaseStatus.LEASE_STATUS_OPEN,
        state: "active",
        terms: undefined,
        rooms: [room(`${leaseId}-slots`, LeaseResource.LEASE_RESOURCE_SLOTS)],
      },
    ],
    keyBudgets: [],
    appliedSequence: 0n,
    limitPerMinute: 60n,
  };
}

let sequence = 0n;
const at = (receivedAt = 1) => ({ sequence: (sequence += 1n), sentAt: 0, receivedAt, marginMs: 10 });

describe("the leases an edge holds", () => {
  it("adopts a grant's lease for its account, retiring the one it replaces", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    const one = held.inUse("account-1")!;
    held.adopt(state("two"), "free", at());
    expect(held.inUse("account-1")!.leaseId).toBe("two");
    expect(one.open).toBe(false);
    expect(held.isRetired(one)).toBe(true);
    expect(held.retiredOf("account-1")).toBe(one);
    expect(held.all().map((l) => l.leaseId)).toEqual(["two", "one"]);
  });

  it("never brings back a retired or closed lease from a late grant reply", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    held.retire(held.inUse("account-1")!);
    held.adopt(state("one"), "free", at());
    expect(held.inUse("account-1")).toBeUndefined();

    held.applyBeat(state("one", LeaseStatus.LEASE_STATUS_CLOSED), at(100), false);
    expect(held.all()).toEqual([]);
    held.adopt(state("one"), "free", at());
    expect(held.inUse("account-1")).toBeUndefined();
    // Forgotten past any grant reply sent before the close: the id may be adopted again.
    held.forgetClosed(100 + FORGET_CLOSED_MS + 1);
    held.adopt(state("one"), "free", at());
    expect(held.inUse("account-1")?.leaseId).toBe("one");
  });

  it("keeps reporting a closed lease until the calls on its slots have ended", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    const one = held.inUse("account-1")!;
    const slots = one.budgets.get("sub-1")!.rooms[0]!;
    slots.admitted = 1n; // a call running on one of its slots
    held.retire(one);
    // Billing closed it on the final report that named the call: it holds the slot until a
    // report says the call ended, so the lease stays to carry that report.
    let beat = at(100);
    expect(one.report(true, 500, beat.sequence).admitted).toContainEqual({ allowanceId: "one-slots", admitted: 1n });
    held.applyBeat(state("one", LeaseStatus.LEASE_STATUS_CLOSED), beat, false);
    expect(held.all()).toEqual([one]);
    // The call ends after the next beat's send and before its reply: that report still counted
    // it, so billing holds its slot, and the lease stays for a report that says it ended.
    beat = at(200);
    expect(one.report(true, 500, beat.sequence).admitted).toContainEqual({ allowanceId: "one-slots", admitted: 1n });
    slots.admitted = 0n;
    held.applyBeat(state("one", LeaseStatus.LEASE_STATUS_CLOSED), beat, false);
    expect(held.all()).toEqual([one]);
    beat = at(300);
    expect(one.report(true, 500, beat.sequence).admitted).toContainEqual({ allowanceId: "one-slots", admitted: 0n });
    held.applyBeat(state("one", LeaseStatus.LEASE_STATUS_CLOSED), beat, false);
    expect(held.all()).toEqual([]);
  });

  it("names the account's retired leases with a call ended since their last report", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    const one = held.inUse("account-1")!;
    const slots = one.budgets.get("sub-1")!.rooms[0]!;
    slots.admitted = 2n; // two calls running
    held.adopt(state("two"), "free", at()); // a grant's lease replaces it: retired
    expect(held.endedUnreported("account-1")).toEqual([]);
    // Its last report (the grant's) counted the two calls: billing closed it holding two slots.
    one.report(false, 500, 10n);
    slots.admitted = 1n; // one of them ended
    expect(held.endedUnreported("account-1")).toEqual([one]);
    expect(held.endedUnreported("account-2")).toEqual([]);
    // Reported (the calls now in flight): nothing is left for billing to learn.
    expect(one.report(true, 500, 11n).admitted).toContainEqual({ allowanceId: "one-slots", admitted: 1n });
    expect(held.endedUnreported("account-1")).toEqual([]);
    // A lease in use reports its ends itself, with the account's next grant or heartbeat.
    const two = held.inUse("account-1")!;
    two.budgets.get("sub-1")!.rooms[0]!.admitted = 1n;
    two.report(false, 500, 12n);
    two.budgets.get("sub-1")!.rooms[0]!.admitted = 0n;
    expect(held.endedUnreported("account-1")).toEqual([]);
  });

  it("retires a lease a heartbeat reply says is fenced", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    held.applyBeat(state("one", LeaseStatus.LEASE_STATUS_FENCED), at(), false);
    expect(held.inUse("account-1")).toBeUndefined();
    expect(held.all().map((l) => [l.leaseId, l.open])).toEqual([["one", false]]);
  });

  it("gives back an open lease it never heard of, unless a grant of the account is on its way", () => {
    const held = new HeldLeases();
    held.applyBeat(state("lost", LeaseStatus.LEASE_STATUS_OPEN, "account-2"), at(), true);
    expect(held.all()).toEqual([]);
    held.applyBeat(state("lost", LeaseStatus.LEASE_STATUS_OPEN, "account-2"), at(), false);
    const orphan = held.retiredOf("account-2")!;
    expect(orphan.leaseId).toBe("lost");
    expect(held.inUse("account-2")).toBeUndefined();
  });

  it("on a recall of the whole lease, stops admitting and reports it final", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    const lease = held.find("one")!;
    const report = held.recall(lease, "", 7n, 1_000);
    expect(report).toMatchObject({ leaseId: "one", final: true });
    expect(held.inUse("account-1")).toBeUndefined();
    expect(held.find("one")).toBe(lease);
    expect(lease.finalSent).toBe(true);
  });

  it("on a recall of one budget, closes it alone, never reopened by a reply to an earlier call", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    const lease = held.inUse("account-1")!;
    const recalledAt = sequence + 1n;
    const report = held.recall(lease, "sub-1", recalledAt, 1_000);
    expect(report.final).toBe(false);
    expect(held.inUse("account-1")).toBe(lease);
    expect(lease.budgets.get("sub-1")).toMatchObject({ open: false, recalledAt });
    lease.apply(state("one"), { sequence: recalledAt - 1n, sentAt: 0, receivedAt: 1, marginMs: 10 });
    expect(lease.budgets.get("sub-1")!.open).toBe(false);
    lease.apply(state("one"), { sequence: recalledAt + 1n, sentAt: 0, receivedAt: 1, marginMs: 10 });
    expect(lease.budgets.get("sub-1")!.open).toBe(true);
  });

  it("counts requests in flight on leases in use and retired", () => {
    const held = new HeldLeases();
    held.adopt(state("one"), "free", at());
    held.adopt(state("two", LeaseStatus.LEASE_STATUS_OPEN, "account-2"), "free", at());
    held.inUse("account-1")!.inFlight = 2;
    held.inUse("account-2")!.inFlight = 1;
    held.retire(held.inUse("account-1")!);
    expect(held.inFlight()).toBe(3);
    held.clear();
    expect(held.all()).toEqual([]);
  });

  it("on a heartbeat's reply, extends by the session only the unreported leases valid at the send", () => {
    const held = new HeldLeases();
    held.adopt(state("valid"), "free", at());
    held.adopt(state("lapsed", LeaseStatus.LEASE_STATUS_OPEN, "account-2"), "free", at());
    const valid = held.inUse("account-1")!;
    const lapsed = held.inUse("account-2")!;
    lapsed.validUntil = 500;
    // A beat sent at 1,000 answered with a session valid for 2,000 ms more, listing neither.
    const reply = { sequence: (sequence += 1n), sentAt: 1_000, receivedAt: 1_001, marginMs: 10 };
    held.applyBeatReply([], 2_000, [valid, lapsed], reply, () => false);
    expect(valid.validUntil).toBe(2_990);
    expect(lapsed.validUntil).toBe(500);
  });

  it("reports a planned beat: final leases retired first, the others pinned until a reply", () => {
    const held = new HeldLeases();
    held.adopt(state("idle"), "free", at());
    held.adopt(state("busy", LeaseStatus.LEASE_STATUS_OPEN, "account-2"), "free", at());
    const idle = held.inUse("account-1")!;
    const busy = held.inUse("account-2")!;
    busy.demand = { credit: 10n, requests: 1n };
    const reports = held.reportInBeat(
      {
        retire: [idle],
        reports: [
          { lease: idle, reason: "final", final: true, nextWindow: false, keepSpareCredit: undefined },
          { lease: busy, reason: "changed", final: false, nextWindow: false, keepSpareCredit: undefined },
        ],
        unreported: [],
      },
      9n,
      1_000,
    );
    expect(reports.map((r) => [r.leaseId, r.final, r.slotsPinned])).toEqual([
      ["idle", true, true],
      ["busy", false, true],
    ]);
    expect(held.inUse("account-1")).toBeUndefined();
    expect(busy.pinned?.sequence).toBe(9n);
    expect(busy.demand).toEqual({ credit: 0n, requests: 0n });
  });
});
