import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros, splitRevenue } from "@mkt/runtime/money";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// A subscription's requests are priced and limited by its plan, through the edge, with real
// hoster-servers: one answering at once, one streaming slowly (for the concurrency limit).
let system: RunningSystem;
let fast: RegisteredHoster;
let slow: RegisteredHoster;

type Json = Record<string, unknown>;

beforeAll(async () => {
  system = await startSystem();
  fast = await registerHoster(system, { name: "Fast Hoster" });
  // 1000-token answers at 20 tokens a second: a stream stays open until its client leaves.
  slow = await registerHoster(system, {
    name: "Slow Hoster",
    serverEnv: { DEMO_TOKENS_PER_SECOND: "20", DEMO_COMPLETION_TOKENS: "1000" },
  });
});
afterAll(async () => {
  // The system first: closing registry closes its pooled connections to the hoster-servers,
  // which would otherwise hold their close open until an idle timeout.
  await system?.close();
  await fast?.server.close();
  await slow?.server.close();
});

async function createPlan(hoster: RegisteredHoster, body: Json): Promise<string> {
  const res = await fetch(`${system.url}/hosters/products`, {
    method: "POST",
    headers: { cookie: hoster.cookie, "content-type": "application/json" },
    body: JSON.stringify({ name: "Plan", ...body }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as Json).product_id as string;
}

/** A new customer subscribed to the plan: its own key and the subscription's scoped key. */
async function subscribe(productId: string): Promise<{ apiKey: string; scopedKey: string }> {
  const { apiKey } = await signUp(system.url);
  const res = await fetch(`${system.url}/v1/subscriptions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ product_id: productId }),
  });
  expect(res.status).toBe(201);
  return { apiKey, scopedKey: ((await res.json()) as Json).api_key as string };
}

function chat(key: string, body: Json = {}, signal?: AbortSignal) {
  return fetch(`${system.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "Hello there." }], ...body }),
    signal,
  });
}

async function errorOf(res: Response): Promise<Json> {
  return ((await res.json()) as { error: Json }).error;
}

describe("plans through the edge", () => {
  it("payg: charged at the plan's prices, 20% platform fee and 80% hoster share in the breakdown", async () => {
    const plan = await createPlan(fast, {
      pricing_model: "payg",
      input_price_per_1m_usd: 2.5,
      output_price_per_1m_usd: 9.999999,
    });
    const { scopedKey } = await subscribe(plan);
    const client = new OpenAI({ apiKey: scopedKey, baseURL: `${system.url}/v1` });
    const completion = await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "Price this, please." }],
    });
    const { prompt_tokens, completion_tokens } = completion.usage!;
    const cost = costMicros(BigInt(prompt_tokens), BigInt(completion_tokens), 2_500_000n, 9_999_999n);
    const { platformFee, hosterEarned } = splitRevenue(cost, true);
    expect(platformFee).toBe((cost * 20n) / 100n);

    await waitForUsage(system.url, scopedKey, (u: { usage_30d: { total_requests: number } }) => {
      return u.usage_30d.total_requests === 1;
    });
    const res = await fetch(`${system.url}/v1/usage/breakdown?days=1`, {
      headers: { authorization: `Bearer ${scopedKey}` },
    });
    expect(res.status).toBe(200);
    const { by_model } = (await res.json()) as { by_model: Json[] };
    expect(by_model).toHaveLength(1);
    const row = by_model[0]!;
    expect(row).toMatchObject({
      model_id: fast.modelId,
      provider: "hoster",
      requests: 1,
      input_tokens: prompt_tokens,
      output_tokens: completion_tokens,
    });
    const micros = (usd: unknown) => BigInt(Math.round((usd as number) * 1e6));
    expect(micros(row.total_cost_usd)).toBe(cost);
    expect(micros(row.platform_fee_usd)).toBe(platformFee);
    expect(micros(row.hoster_earned_usd)).toBe(hosterEarned);
  });

  it("subscription: requests stop with 429 included_tokens_exhausted once the allowance is used", async () => {
    // Each demo exchange is a few dozen tokens: the second request crosses the 60-token allowance.
    const plan = await createPlan(fast, {
      pricing_model: "subscription",
      monthly_price_usd: 0.5,
      included_tokens: 60,
    });
    const { scopedKey } = await subscribe(plan);
    for (let i = 1; i <= 2; i++) {
      expect((await chat(scopedKey)).status).toBe(200);
      // Settlement is asynchronous: the allowance counts settled requests.
      await waitForUsage(system.url, scopedKey, (u: { usage_30d: { total_requests: number } }) => {
        return u.usage_30d.total_requests === i;
      });
    }
    const refused = await chat(scopedKey);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(27 * 86_400);
    expect(await errorOf(refused)).toMatchObject({ type: "rate_limit_error", code: "included_tokens_exhausted" });
  });

  it("max_concurrent: the third stream waits its turn; a client that leaves frees its slot", async () => {
    const plan = await createPlan(slow, { pricing_model: "free", max_concurrent: 2 });
    const { scopedKey } = await subscribe(plan);
    const aborts = [new AbortController(), new AbortController()];
    try {
      for (const abort of aborts) {
        const res = await chat(scopedKey, { stream: true }, abort.signal);
        expect(res.status).toBe(200);
        await res.body!.getReader().read(); // the stream is running
      }
      const third = await chat(scopedKey, { stream: true });
      expect(third.status).toBe(429);
      expect(third.headers.get("retry-after")).toBe("1");
      expect(await errorOf(third)).toMatchObject({ type: "rate_limit_error", code: "concurrency_limit_exceeded" });

      // The client of the first stream goes away: registry releases its slot on that exit path.
      aborts[0]!.abort();
      const deadline = Date.now() + 5_000;
      let next: Response;
      for (;;) {
        aborts.push(new AbortController());
        next = await chat(scopedKey, { stream: true }, aborts.at(-1)!.signal);
        if (next.status === 200 || Date.now() > deadline) break;
        await next.body?.cancel();
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(next.status).toBe(200);
    } finally {
      for (const abort of aborts) abort.abort();
    }
  });

  it("rpm: the plan's requests per minute, with rate-limit headers on answers and on the 429", async () => {
    const plan = await createPlan(fast, { pricing_model: "free", rpm_limit: 3 });
    const { scopedKey } = await subscribe(plan);
    // Four requests in one calendar minute: start early enough in it.
    const intoMinute = Date.now() % 60_000;
    if (intoMinute > 55_000) await new Promise((resolve) => setTimeout(resolve, 60_500 - intoMinute));

    const remaining: Array<string | null> = [];
    for (let i = 0; i < 3; i++) {
      const res = await chat(scopedKey, { max_tokens: 5 });
      expect(res.status).toBe(200);
      expect(res.headers.get("x-ratelimit-limit-requests")).toBe("3");
      remaining.push(res.headers.get("x-ratelimit-remaining-requests"));
      await res.arrayBuffer();
    }
    expect(remaining).toEqual(["2", "1", "0"]);
    const refused = await chat(scopedKey, { max_tokens: 5 });
    expect(refused.status).toBe(429);
    const reset = Number(refused.headers.get("retry-after"));
    expect(reset).toBeGreaterThanOrEqual(1);
    expect(reset).toBeLessThanOrEqual(60);
    expect(Object.fromEntries([...refused.headers].filter(([name]) => name.startsWith("x-ratelimit")))).toEqual({
      "x-ratelimit-limit-requests": "3",
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": `${reset}s`,
    });
    expect(await errorOf(refused)).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });

    // Another subscriber of the same plan has its own minute.
    const other = await subscribe(plan);
    expect((await chat(other.scopedKey, { max_tokens: 5 })).status).toBe(200);
  });

  it("an output field above the plan's cap is lowered to it on every API, never refused", async () => {
    const plan = await createPlan(fast, { pricing_model: "free", max_output_tokens: 8 });
    const { scopedKey } = await subscribe(plan);
    // Chat: max_tokens and max_completion_tokens, as agents send them, far above the plan's 8.
    for (const field of ["max_tokens", "max_completion_tokens"]) {
      const res = await chat(scopedKey, { [field]: 32_000 });
      const body = (await res.json()) as { choices: Json[]; usage: { completion_tokens: number } };
      expect(res.status, JSON.stringify(body)).toBe(200);
      expect(body.usage.completion_tokens).toBe(8);
      expect(body.choices[0]!.finish_reason).toBe("length");
    }
    // Messages: Claude Code's 64,000.
    const message = await fetch(`${system.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": scopedKey, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", max_tokens: 64_000, messages: [{ role: "user", content: "Hello." }] }),
    });
    const answer = (await message.json()) as Json & { usage: { output_tokens: number } };
    expect(message.status, JSON.stringify(answer)).toBe(200);
    expect(answer).toMatchObject({ stop_reason: "max_tokens", usage: { output_tokens: 8 } });
    // Responses: max_output_tokens.
    const response = await fetch(`${system.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${scopedKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", max_output_tokens: 32_000, input: "Hello." }),
    });
    const result = (await response.json()) as Json;
    expect(response.status, JSON.stringify(result)).toBe(200);
    expect(result).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      usage: { output_tokens: 8 },
    });

    // Without max_tokens the plan's cap applies: the 24-token demo answer stops at 8.
    const client = new OpenAI({ apiKey: scopedKey, baseURL: `${system.url}/v1` });
    const completion = await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "Go on at length." }],
    });
    expect(completion.usage!.completion_tokens).toBeLessThanOrEqual(8);
    expect(completion.choices[0]!.finish_reason).toBe("length");
  });
});
