import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authorizeRequest, startTestBilling, type TestBilling } from "./billing-harness.ts";
import { refusal } from "@mkt/testkit/refusal";

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

describe("tier rate limits", () => {
  it("admits the per-minute limit, then refuses with rate-limit headers", async () => {
    const accountId = randomUUID();
    const remaining: bigint[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await t.client.authorize(authorizeRequest({ accountId, tier: "free" }));
      remaining.push(res.rateLimit!.remainingThisMinute);
      expect(res.rateLimit).toMatchObject({ limitPerMinute: 3n, resetSeconds: 30n });
    }
    expect(remaining).toEqual([2n, 1n, 0n]);

    const err = await refusal(t.client.authorize(authorizeRequest({ accountId, tier: "free" })));
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
    expect(await t.query(`select 1 from reservations where account_id = $1`, [accountId])).toHaveLength(3);
  });

  it("does not count refused requests, and opens again in the next minute", async () => {
    const accountId = randomUUID();
    await t.client.authorize(authorizeRequest({ accountId }));
    // Refused for credit (max_tokens far beyond the balance): rolled back, not counted.
    const broke = await refusal(
      t.client.authorize(
        authorizeRequest({ accountId, outputPricePer1mMicros: 2_000_000_000n, requestedMaxOutputTokens: 4000n }),
      ),
    );
    expect(broke.code).toBe("insufficient_credits");
    await t.client.authorize(authorizeRequest({ accountId }));
    await t.client.authorize(authorizeRequest({ accountId }));
    await refusal(t.client.authorize(authorizeRequest({ accountId })));

    const saved = now;
    now = new Date("2026-11-22T10:01:05.000Z");
    try {
      const res = await t.client.authorize(authorizeRequest({ accountId }));
      expect(res.rateLimit).toMatchObject({ remainingThisMinute: 2n, resetSeconds: 55n });
      const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
      expect(summary.rateLimits).toMatchObject({ requestsThisMinute: 1n, requestsToday: 4n });
    } finally {
      now = saved;
    }
  });

  it("enforces the daily limit of the account's tier, with the day's reset", async () => {
    const accountId = randomUUID();
    await t.client.authorize(authorizeRequest({ accountId, tier: "daily" }));
    await t.client.authorize(authorizeRequest({ accountId, tier: "daily" }));
    const err = await refusal(t.client.authorize(authorizeRequest({ accountId, tier: "daily" })));
    expect(err.code).toBe("rate_limit_exceeded");
    expect(err.headers).toMatchObject({
      "retry-after": String(14 * 3600 - 30),
      "x-ratelimit-limit-requests": "2",
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": `${14 * 3600 - 30}s`,
    });
  });

  it("applies the free limits to an unknown tier", async () => {
    const accountId = randomUUID();
    const res = await t.client.authorize(authorizeRequest({ accountId, tier: "no-such-tier" }));
    expect(res.rateLimit?.limitPerMinute).toBe(3n);
  });
});
