import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { LeaseResource, LeaseStatus, type LeaseNeed } from "@mkt/proto/billing/v1/leases";
import { startTestBilling, type TestBilling, openTestOrm } from "./billing-harness.ts";

const TTL = 2_000;
// A fixed clock 10 s into a UTC minute, inside the subscriptions' period.
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
const offsetMs = 0;
let t: TestBilling;
let orm: Orm;

beforeAll(async () => {
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      MAX_REQUEST_MS: "60000",
      TIERS: JSON.stringify({ free: { limit_per_minute: 1000, limit_per_day: 100000 } }),
    },
    { clock: () => new Date(BASE + offsetMs) },
  );
  orm = await openTestOrm(t, createLogger("lease-budget-test", "silent"));
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
});

const edge = () => `edge_${randomUUID()}`;
const need = (subscriptionId: string, tokens = 100n, requests = 1n): LeaseNeed => ({
  creditMicros: 0n,
  requests,
  tokens,
  subscriptionId,
  keyId: "",
});

/** An active subscription with the given plan limits (its key is never issued: no accounts call). */
async function subscription(terms: { rpm?: number; tpm?: number; concurrent?: number; included?: number } = {}) {
  const accountId = randomUUID();
  const id = randomUUID();
  await t.query(
    `insert into subscriptions (id, account_id, idempotency_key, product_id, status, hoster_id, pricing_model,
       included_tokens, rpm_limit, tpm_limit, max_concurrent, max_output_tokens, max_context_tokens,
       period_index, period_start, period_end, activated_at, created_at)
     values ($1, $2, 'k', $3, 'active', $4, $5, $6, $7, $8, $9, 4096, 8192, 0, $10, $11, $10, $10)`,
    [
      id,
      accountId,
      randomUUID(),
      randomUUID(),
      terms.included === undefined ? "free" : "subscription",
      terms.included ?? 0,
      terms.rpm ?? 60,
      terms.tpm ?? 100_000,
      terms.concurrent ?? 5,
      new Date(BASE - 86_400_000),
      new Date(BASE + 20 * 86_400_000),
    ],
  );
  return { accountId, id };
}

const grant = (edgeId: string, sequence: bigint, accountId: string, request: LeaseNeed, demand?: LeaseNeed) =>
  t.client.grantLease({
    edgeId,
    incarnation: 0n,
    bootId: "",
    sequence,
    accountId,
    tier: "free",
    minCreditMicros: 0n,
    request,
    demandPerSecond: demand,
  });

const room = (
  lease: { budgets: Array<{ rooms: Array<{ resource: LeaseResource; granted: bigint }> }> },
  r: LeaseResource,
) => lease.budgets[0]!.rooms.find((x) => x.resource === r)?.granted ?? 0n;

describe("subscription budgets in leases", () => {
  it("grants within plan rpm, and never more than the plan across two edges in a minute", async () => {
    const sub = await subscription({ rpm: 3 });
    const [a, b] = [edge(), edge()];
    const first = (await grant(a, 1n, sub.accountId, need(sub.id), need(sub.id, 100n, 10n))).lease!;
    expect(first.budgets[0]).toMatchObject({ subscriptionId: sub.id, status: LeaseStatus.LEASE_STATUS_OPEN });
    // Alone on the subscription, edge A's demand takes the whole minute (the sizing rule)...
    expect(room(first, LeaseResource.LEASE_RESOURCE_REQUESTS_PER_MINUTE)).toBe(3n);
    // ...so edge B, and a third, are refused with the plan's 429: never more than rpm lent out.
    await expect(grant(b, 1n, sub.accountId, need(sub.id))).rejects.toMatchObject({
      message: expect.stringContaining("Rate limit reached for this subscription: 3 requests per minute"),
    });
    await expect(grant(edge(), 1n, sub.accountId, need(sub.id))).rejects.toMatchObject({
      message: expect.stringContaining("Rate limit reached for this subscription: 3 requests per minute"),
    });
    const [row] = await t.query<{ requests: string }>(
      `select requests from subscription_rate_counters where subscription_id = $1`,
      [sub.id],
    );
    expect(BigInt(row!.requests)).toBe(3n);
  });

  it("holds tpm, slots and included tokens at the plan's limits", async () => {
    const tpm = await subscription({ tpm: 1000 });
    await grant(edge(), 1n, tpm.accountId, need(tpm.id, 900n));
    await expect(grant(edge(), 1n, tpm.accountId, need(tpm.id, 200n))).rejects.toMatchObject({
      message: expect.stringContaining("Token rate limit reached for this subscription: 1000 tokens per minute"),
    });

    const slots = await subscription({ concurrent: 1 });
    const edgeId = edge();
    const lease = (await grant(edgeId, 1n, slots.accountId, need(slots.id))).lease!;
    expect(room(lease, LeaseResource.LEASE_RESOURCE_SLOTS)).toBe(1n);
    await expect(grant(edge(), 1n, slots.accountId, need(slots.id))).rejects.toMatchObject({
      message: expect.stringContaining("This subscription allows 1 request at a time"),
    });
    // No request in flight: the heartbeat takes the idle slot back, and another edge gets it.
    await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        { leaseId: lease.leaseId, admitted: [], final: false, budgetDemand: [], nextWindow: false, slotsPinned: true },
      ],
    });
    const other = (await grant(edge(), 1n, slots.accountId, need(slots.id))).lease!;
    expect(room(other, LeaseResource.LEASE_RESOURCE_SLOTS)).toBe(1n);

    // A `subscription` plan admits while any included tokens are left: the request crossing the
    // line gets what is left (and is served in full); once none are left it is refused.
    // The line is crossed once per period, by the request that meets it when no other edge holds
    // included tokens it has not used: while the first edge's 400 are unreported the crossing is
    // refused; once it reports them admitted (a heartbeat here, a recall's ack in production),
    // the crossing request gets the 100 left.
    const included = await subscription({ included: 500 });
    const first = edge();
    const held = (await grant(first, 1n, included.accountId, need(included.id, 400n))).lease!;
    await expect(grant(edge(), 1n, included.accountId, need(included.id, 200n))).rejects.toMatchObject({
      code: "included_tokens_exhausted",
    });
    const includedRoom = held.budgets[0]!.rooms.find(
      (r) => r.resource === LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS,
    )!;
    await t.client.heartbeat({
      unansweredGrantAccounts: [],
      edgeId: first,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        {
          leaseId: held.leaseId,
          admitted: [{ allowanceId: includedRoom.allowanceId, admitted: 400n }],
          final: false,
          budgetDemand: [],
          nextWindow: false,
          slotsPinned: true,
        },
      ],
    });
    const { lease: crossing, includedCrossing } = await grant(edge(), 1n, included.accountId, need(included.id, 200n));
    expect(includedCrossing).toBe(true);
    expect(room(crossing!, LeaseResource.LEASE_RESOURCE_INCLUDED_TOKENS)).toBe(100n);
    await expect(grant(edge(), 1n, included.accountId, need(included.id, 1n))).rejects.toMatchObject({
      message: expect.stringContaining("500 included tokens for the current period are used up"),
    });
  });

  it("refuses paused, past due and cancelled subscriptions with their codes", async () => {
    for (const [status, text] of [
      ["paused", "Your access has been temporarily paused by the hoster."],
      ["past_due", "This subscription's renewal is unpaid"],
      ["cancelled", "Invalid API key: its subscription has been cancelled."],
    ] as const) {
      const sub = await subscription();
      await t.query(`update subscriptions set status = $1 where id = $2`, [status, sub.id]);
      await expect(grant(edge(), 1n, sub.accountId, need(sub.id))).rejects.toMatchObject({
        message: expect.stringContaining(text),
      });
    }
    // Another account's subscription is an invalid key.
    const sub = await subscription();
    await expect(grant(edge(), 1n, randomUUID(), need(sub.id))).rejects.toMatchObject({
      message: expect.stringContaining("Invalid API key."),
    });
  });

  it("a cancel fences the budget, and a heartbeat racing it never revives it", async () => {
    const sub = await subscription();
    const edgeId = edge();
    const { lease } = await grant(edgeId, 1n, sub.accountId, need(sub.id), need(sub.id, 100n, 1n));
    const report = {
      leaseId: lease!.leaseId,
      admitted: [],
      final: false,
      budgetDemand: [need(sub.id, 100n, 5n)],
      nextWindow: false,
      slotsPinned: true,
    };
    let racing: ReturnType<typeof t.client.heartbeat> | undefined;
    await orm.em.fork().transactional(async (em) => {
      // What cancelSubscription commits: the status and the fence, in one transaction.
      await em.execute(`update subscriptions set status = 'cancelled' where id = ?`, [sub.id]);
      const { fenceBudgets } = await import("../src/leases/fence-budgets.ts");
      expect(await fenceBudgets(em, sub.id, "cancelled", new Date(BASE))).toEqual([
        { leaseId: lease!.leaseId, edgeId },
      ]);
      racing = t.client.heartbeat({
        unansweredGrantAccounts: [],
        edgeId,
        incarnation: 0n,
        bootId: "",
        sequence: 2n,
        leases: [report],
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
    });
    const raced = (await racing!).leases[0]!;
    expect(raced.status).toBe(LeaseStatus.LEASE_STATUS_OPEN); // the account's lease lives on
    expect(raced.budgets[0]).toMatchObject({ status: LeaseStatus.LEASE_STATUS_FENCED, state: "cancelled" });
    expect(raced.budgets[0]!.rooms.every((r) => r.validForMs === 0n)).toBe(true);
    const later = (
      await t.client.heartbeat({
        unansweredGrantAccounts: [],
        edgeId,
        incarnation: 0n,
        bootId: "",
        sequence: 3n,
        leases: [report],
      })
    ).leases[0]!;
    expect(later.budgets[0]!.status).toBe(LeaseStatus.LEASE_STATUS_FENCED);
    await expect(grant(edgeId, 4n, sub.accountId, need(sub.id))).rejects.toMatchObject({
      message: expect.stringContaining("its subscription has been cancelled"),
    });
  });

  it("cancelSubscription fences the subscription's budgets in its transaction", async () => {
    const sub = await subscription();
    const edgeId = edge();
    await grant(edgeId, 1n, sub.accountId, need(sub.id));
    await t.client.cancelSubscription({ accountId: sub.accountId, subscriptionId: sub.id });
    const [row] = await t.query<{ status: string; state: string }>(
      `select status, state from lease_budgets where subscription_id = $1`,
      [sub.id],
    );
    expect(row).toEqual({ status: "fenced", state: "cancelled" });
  });
});
