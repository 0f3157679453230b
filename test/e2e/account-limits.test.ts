import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { postChat } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Reports trail admission by one lease heartbeat (5 s in the e2e systems): the polls below wait for it.
vi.setConfig({ testTimeout: 90_000 });

interface RateLimits {
  requests_this_minute: number;
  requests_today: number;
  limit_per_minute: number;
  limit_per_day: number;
  remaining_this_minute: number;
  remaining_today: number;
}

const PER_MINUTE = 3;

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem({
    edges: 2,
    billing: { TIERS: JSON.stringify({ free: { limit_per_minute: PER_MINUTE, limit_per_day: 1000 } }) },
  });
});
afterAll(async () => {
  await system?.close();
});

/**
 * The per-minute window is the UTC calendar minute of billing's real clock here. A test that
 * started in the last seconds of a minute would see its counts reset half-way, so it waits for
 * the next minute instead.
 */
async function awayFromMinuteEnd(): Promise<void> {
  const intoMinute = Date.now() % 60_000;
  if (intoMinute > 50_000) await new Promise((resolve) => setTimeout(resolve, 60_000 - intoMinute + 100));
}

const ask = (url: string, apiKey: string) =>
  postChat(url, apiKey, { model: "demo-small", max_tokens: 5, messages: [{ role: "user", content: "hi" }] });

async function rateLimits(url: string, apiKey: string): Promise<RateLimits> {
  const res = await fetch(`${url}/v1/usage`, { headers: { authorization: `Bearer ${apiKey}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { rate_limits: RateLimits }).rate_limits;
}

describe("account rate limits at the edge", () => {
  it("counts requests across both edges, reports them live, then answers 429 with the rate-limit headers", async () => {
    await awayFromMinuteEnd();
    const { apiKey } = await signUp(system.url);
    const [edgeA, edgeB] = system.urls as [string, string];

    const first = await ask(edgeA, apiKey);
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit-requests")).toBe(String(PER_MINUTE));
    expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("2");
    expect(first.headers.get("x-ratelimit-reset-requests")).toMatch(/^\d+s$/);
    await first.text();

    // The other edge shares the count: billing recalls the room edge A's lease holds unused. Its
    // header says what its own lease can still admit, never more than the account has left.
    const second = await ask(edgeB, apiKey);
    expect(second.status).toBe(200);
    expect(Number(second.headers.get("x-ratelimit-remaining-requests"))).toBeLessThanOrEqual(1);
    await second.text();
    // Reports trail admission by at most one heartbeat (docs/leases.md#how-much-room-an-edge-gets).
    await expect
      .poll(() => rateLimits(edgeA, apiKey), { timeout: 20_000 })
      .toMatchObject({
        requests_this_minute: 2,
        requests_today: 2,
        limit_per_minute: PER_MINUTE,
        remaining_this_minute: 1,
      });

    const third = await ask(edgeA, apiKey);
    expect(third.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    await third.text();

    const refused = await ask(edgeB, apiKey);
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded", param: null });
    expect(body.error.message).toMatch(/3 requests per minute/);
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(refused.headers.get("x-ratelimit-limit-requests")).toBe(String(PER_MINUTE));
    expect(refused.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    expect(refused.headers.get("x-ratelimit-reset-requests")).toBe(`${retryAfter}s`);

    // A refused request is not counted, on either edge.
    expect((await ask(edgeA, apiKey)).status).toBe(429);
    await expect
      .poll(() => rateLimits(edgeB, apiKey), { timeout: 20_000 })
      .toEqual({
        requests_this_minute: PER_MINUTE,
        requests_today: PER_MINUTE,
        limit_per_minute: PER_MINUTE,
        limit_per_day: 1000,
        remaining_this_minute: 0,
        remaining_today: 1000 - PER_MINUTE,
      });
  });

  it("admits exactly the limit when a burst hits both edges at once", async () => {
    await awayFromMinuteEnd();
    const { apiKey } = await signUp(system.url);
    const statuses = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const res = await ask(system.urls[i % 2]!, apiKey);
        await res.text();
        return res.status;
      }),
    );
    // Never more than the limit; a burst may be refused while room sits in the other edge's lease
    // (an edge that was refused refuses the account itself until its next heartbeat reply) ...
    let admitted = statuses.filter((s) => s === 200).length;
    expect(admitted).toBeGreaterThan(0);
    expect(admitted).toBeLessThanOrEqual(PER_MINUTE);
    expect(statuses.filter((s) => s === 429)).toHaveLength(12 - admitted);
    // ... but no room is lost: within a few heartbeats the account is served to exactly its limit.
    const until = Date.now() + 20_000;
    for (let i = 0; admitted < PER_MINUTE && Date.now() < until; i++) {
      const res = await ask(system.urls[i % 2]!, apiKey);
      await res.text();
      if (res.status === 200) admitted += 1;
      else await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(admitted).toBe(PER_MINUTE);
    for (const url of system.urls) expect((await ask(url, apiKey)).status).toBe(429);
    await expect
      .poll(async () => (await rateLimits(system.urls[1]!, apiKey)).requests_this_minute, { timeout: 20_000 })
      .toBe(PER_MINUTE);
  });
});
