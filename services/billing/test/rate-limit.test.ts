import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { admitOnLease, startTestBilling, type TestBilling } from "./billing-harness.ts";
import { refusal } from "@mkt/testkit/refusal";

// The account tier's request limits, as lease grants enforce them
// (docs/architecture.md#admission-on-a-lease): each request is admitted on a lease its edge then
// returns, so every window counts exactly what was admitted.
let t: TestBilling;
// 30 s into a UTC minute, 10 h into the day: the windows reset in 30 s and 14 h.
let now = new Date("2026-11-22T10:00:30.000Z");
beforeAll(async () => {
  t = await startTestBilling(
    {
      TIERS: JSON.stringify({
        free: { limit_per_minute: 3, limit_per_day: 100 },
        daily: { limit_per_minute: 100, limit_per_day: 2 },
      }),
    },
    { clock: () => now },
  );
});
afterAll(async () => {
  await t?.close();
});

const admit = (accountId: string, tier = "free", worstCaseMicros = 350n) =>
  admitOnLease(t, { accountId, tier, worstCaseMicros });

describe("tier rate limits", () => {
  it("admits the per-minute limit, then refuses with rate-limit headers", async () => {
    const accountId = randomUUID();
    for (let i = 0; i < 3; i++) await admit(accountId);

    const err = await refusal(admit(accountId));
    expect(err.code).toBe("rate_limit_exceeded");
    expect(err.httpStatus).toBe(429);
    expect(err.headers).toEqual({
      "retry-after": "30",
      "x-ratelimit-limit-requests": "3",
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": "30s",
    });

    // Only admitted requests were counted, and only they hold money.
    const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
    expect(summary.rateLimits).toEqual({
      requestsThisMinute: 3n,
      requestsToday: 3n,
      limitPerMinute: 3n,
      limitPerDay: 100n,
      remainingThisMinute: 0n,
      remainingToday: 97n,
    });
    expect(summary.creditBalanceMicros).toBe(5_000_000n - 3n * 350n);
  });

  it("does not count refused requests, and opens again in the next minute", async () => {
    const accountId = randomUUID();
    await admit(accountId);
    // Refused for credit (a worst case beyond the balance): rolled back, not counted.
    const broke = await refusal(admit(accountId, "free", 6_000_000n));
    expect(broke.code).toBe("insufficient_credits");
    await admit(accountId);
    await admit(accountId);
    await refusal(admit(accountId));

    const saved = now;
    now = new Date("2026-11-22T10:01:05.000Z");
    try {
      await admit(accountId);
      const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
      expect(summary.rateLimits).toMatchObject({ requestsThisMinute: 1n, requestsToday: 4n, remainingThisMinute: 2n });
    } finally {
      now = saved;
    }
  });

  it("enforces the daily limit of the account's tier, with the day's reset", async () => {
    const accountId = randomUUID();
    await admit(accountId, "daily");
    await admit(accountId, "daily");
    const err = await refusal(admit(accountId, "daily"));
    expect(err.code).toBe("rate_limit_exceeded");
    expect(err.headers).toMatchObject({
      "retry-after": String(14 * 3600 - 30),
      "x-ratelimit-limit-requests": "2",
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": `${14 * 3600 - 30}s`,
    });
  });

  it("applies the free limits to an unknown tier", async () => {
    const { lease } = await t.client.grantLease({
      edgeId: `edge_${randomUUID()}`,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId: randomUUID(),
      tier: "no-such-tier",
      minCreditMicros: 0n,
      request: { creditMicros: 0n, requests: 1n, tokens: 0n, subscriptionId: "", keyId: "" },
    });
    expect(lease!.limitPerMinute).toBe(3n);
  });
});
