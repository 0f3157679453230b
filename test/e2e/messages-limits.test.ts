import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Refusals of the Messages API as Anthropic's SDK meets them: a 429 whose retry-after the SDK
// waits out before it retries, a 402 it sees as billing_error.

// A refused minute is waited out, up to the next minute's start.
vi.setConfig({ testTimeout: 90_000 });

const PER_MINUTE = 2;
let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem({
    billing: { TIERS: JSON.stringify({ free: { limit_per_minute: PER_MINUTE, limit_per_day: 1000 } }) },
  });
});
afterAll(async () => {
  await system?.close();
});

const hi: Anthropic.MessageParam[] = [{ role: "user", content: "hi" }];

describe("rate limits and credit, in Anthropic's shape", () => {
  it("answers 429 rate_limit_error with retry-after, which the SDK waits out and then succeeds", async () => {
    // The window is the UTC minute of billing's clock: spend it in its last seconds, so the
    // retry-after the SDK honours is short.
    const intoMinute = Date.now() % 60_000;
    if (intoMinute < 50_000) await new Promise((resolve) => setTimeout(resolve, 50_000 - intoMinute));
    const { apiKey } = await signUp(system.url);
    const once = new Anthropic({ baseURL: system.url, apiKey, maxRetries: 0 });
    for (let i = 0; i < PER_MINUTE; i++)
      await once.messages.create({ model: "demo-agent", max_tokens: 8, messages: hi });

    const refused = await once.messages
      .create({ model: "demo-agent", max_tokens: 8, messages: hi })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(Anthropic.RateLimitError);
    const error = refused as InstanceType<typeof Anthropic.RateLimitError>;
    expect(error.error).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    const retryAfter = Number(error.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(11);

    const retrying = new Anthropic({ baseURL: system.url, apiKey, maxRetries: 2 });
    const started = Date.now();
    const { data, response } = await retrying.messages
      .create({ model: "demo-agent", max_tokens: 8, messages: hi })
      .withResponse();
    expect(response.status).toBe(200);
    expect(data.type).toBe("message");
    // Refused again at first, the SDK waited for the window's end before the retry that was answered.
    expect(Date.now()).toBeGreaterThanOrEqual(Math.ceil(started / 60_000) * 60_000);
  });

  it("answers 402 billing_error when the worst case exceeds what the key may spend", async () => {
    const { apiKey: owner } = await signUp(system.url);
    const created = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${owner}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "capped", limit_usd: 0.0001, limit_reset: "daily" }),
    });
    const { api_key } = (await created.json()) as { api_key: string };
    const client = new Anthropic({ baseURL: system.url, apiKey: api_key, maxRetries: 0 });
    // 4,000 output tokens at the demo's 1.50 USD per million is 0.006 USD, over the key's limit.
    const refused = await client.messages
      .create({ model: "demo-agent", max_tokens: 4_000, messages: hi })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(Anthropic.APIError);
    const error = refused as InstanceType<typeof Anthropic.APIError>;
    expect(error.status).toBe(402);
    expect(error.error).toMatchObject({ type: "error", error: { type: "billing_error", code: "key_limit_exceeded" } });
  });
});
