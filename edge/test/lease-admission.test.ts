import { describe, expect, it } from "vitest";
import { LeaseResource, LeaseStatus, type LeaseRoom, type LeaseState } from "@mkt/proto/billing/v1/leases";
import { HeldLease } from "../src/leases/held-lease.ts";
import { takeRequest, takeWorstCaseFromLease, type Ticket } from "../src/leases/lease-admission.ts";

// The included/overage split of a subscription's request is decided at admission, from its
// budget's included room, and carried with the request (its usage.cost and settlement use it).

const room = (resource: LeaseResource, granted: bigint): LeaseRoom => ({
  allowanceId: `room-${resource}`,
  resource,
  granted,
  startsInMs: 0n,
  validForMs: 2_000n,
  endsInMs: 0n,
});

function overageLease(included: bigint, pricingModel = "subscription_overage"): HeldLease {
  const state: LeaseState = {
    leaseId: "lease-1",
    accountId: "account-1",
    status: LeaseStatus.LEASE_STATUS_OPEN,
    validForMs: 2_000n,
    credit: room(LeaseResource.LEASE_RESOURCE_UNSPECIFIED, 10_000n),
    rooms: [
      room(LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE, 10n),
      room(LeaseResource.LEASE_RESOURCE_REQUESTS_PER_DAY, 10n),
    ],
    budgets: [
      {
        subscriptionId: "sub-1",
        status: LeaseStatus.LEASE_STATUS_OPEN,
        state: "active",
        terms: {
          hosterId: "hoster-1",
          pricingModel,
          inputPricePer1mMicros: 0n,
          outputPricePer1mMicros: 0n,
          overagePricePer1mMicros: 1_000_000n,
          maxContextTokens: 8_192n,
          maxOutputTokens: 4_096n,
          rpmLimit: 10n,
        },
        rooms: [
          room(LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE, 10n),
          room(LeaseResource.LEASE_RESOURCE_SLOTS, 10n),
          room(LeaseResource.LEASE_RESOURCE_TOKENS_PER_MINUTE, 100_000n),
          room(LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS, included),
        ],
      },
    ],
    appliedSequence: 0n,
    limitPerMinute: 10n,
    keyBudgets: [],
  };
  const lease = new HeldLease(state, "free", 0);
  lease.apply(state, { sequence: 1n, sentAt: 0, receivedAt: 1, marginMs: 10 });
  return lease;
}

const NOW = 100;

function admit(lease: HeldLease, credit: bigint, tokens: bigint, asked: boolean, crossing = false): Ticket | undefined {
  const first = takeRequest(lease, "sub-1", NOW);
  if (!("ok" in first)) throw new Error("no request room");
  const taken = takeWorstCaseFromLease(first.ok, credit, tokens, NOW, { asked, crossing });
  return "ok" in taken ? taken.ok : undefined;
}

describe("the included tokens a subscription_overage request takes at admission", () => {
  it("takes its whole worst case while the included room has it, then what is left, then none", () => {
    const lease = overageLease(1_000n);
    expect(admit(lease, 0n, 600n, false)?.includedTokens).toBe(600n);
    // 400 left for a worst case of 600: short from memory, the rest paid at the overage price
    // once billing was asked (its grant takes what room there is too).
    expect(admit(lease, 200n, 600n, false)).toBeUndefined();
    expect(admit(lease, 200n, 600n, true)?.includedTokens).toBe(400n);
    expect(admit(lease, 600n, 600n, true)?.includedTokens).toBe(0n);
    const included = lease.budgets
      .get("sub-1")!
      .rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS)!;
    expect(included.admitted).toBe(1_000n);
  });
});

describe("the request crossing a subscription plan's included-token line", () => {
  it("takes the room that is left only when billing's grant for it said it crosses", () => {
    const lease = overageLease(1_000n, "subscription");
    expect(admit(lease, 0n, 600n, false)?.includedTokens).toBe(600n);
    // 400 left for 600 tokens: neither from memory nor after a grant that did not say so (the
    // other edges may hold the rest of the period's tokens, and each would cross on its own).
    expect(admit(lease, 0n, 600n, false)).toBeUndefined();
    expect(admit(lease, 0n, 600n, true)).toBeUndefined();
    // Billing's grant said this request crosses: it is served in full with the 400 left.
    expect(admit(lease, 0n, 600n, true, true)?.includedTokens).toBe(400n);
    // And nothing is left for the next one, crossing or not.
    expect(admit(lease, 0n, 600n, true, true)).toBeUndefined();
  });
});
