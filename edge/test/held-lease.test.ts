import { describe, expect, it } from "vitest";
import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { HeldLease } from "../src/leases/held-lease.ts";

const room = (allowanceId: string, resource: LeaseResource, granted: bigint): LeaseRoom => ({
  allowanceId,
  resource,
  granted,
  startsInMs: 0n,
  validForMs: 2_000n,
  endsInMs: 0n,
});

function state(credit: bigint, slots: bigint): LeaseState {
  return {
    leaseId: "lease-1",
    accountId: "account-1",
    status: LeaseStatus.LEASE_STATUS_OPEN,
    validForMs: 2_000n,
    credit: room("credit", LeaseResource.LEASE_RESOURCE_UNSPECIFIED, credit),
    rooms: [],
    budgets: [
      {
        subscriptionId: "sub-1",
        status: LeaseStatus.LEASE_STATUS_OPEN,
        state: "active",
        terms: undefined,
        rooms: [room("slots", LeaseResource.LEASE_RESOURCE_SLOTS, slots)],
      },
    ],
    keyBudgets: [],
    appliedSequence: 0n,
    limitPerMinute: 60n,
  };
}

const at = (sequence: bigint) => ({ sequence, sentAt: 0, receivedAt: 1, marginMs: 10 });

describe("a held lease applying billing's replies", () => {
  it("keeps what an older reply grew (a grant answered after a later heartbeat), never its slots", () => {
    const lease = new HeldLease(state(1_000n, 1n), "free", 0);
    expect(lease.apply(state(1_000n, 2n), at(5n))).toBe(true);
    const slots = lease.budgets.get("sub-1")!.rooms[0]!;
    // The grant (sequence 4) grew the credit to 9,000 and lent 3 slots; the heartbeat (5), applied
    // first, had taken a slot back. Credit is cumulative: the larger is right. Slots are "now".
    expect(lease.apply(state(9_000n, 3n), at(4n))).toBe(false);
    expect(lease.credit!.granted).toBe(9_000n);
    expect(slots.granted).toBe(2n);
  });

  it("keeps a room the same object across replies, with the edge's admitted total", () => {
    const lease = new HeldLease(state(1_000n, 2n), "free", 0);
    lease.apply(state(1_000n, 2n), at(1n));
    const slots = lease.budgets.get("sub-1")!.rooms[0]!;
    slots.admitted = 1n;
    lease.apply(state(2_000n, 2n), at(2n));
    expect(lease.budgets.get("sub-1")!.rooms[0]).toBe(slots);
    expect(slots.admitted).toBe(1n);
  });
});
