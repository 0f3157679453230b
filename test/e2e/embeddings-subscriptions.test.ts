import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { apiCall } from "./api-call.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Embeddings on a subscription's scoped key, priced as its plan prices input tokens: payg at its
// input price, free nothing, the subscription kinds from their included tokens, then an overage
// plan's overage price. The hoster's server is the reference server (its demo answers embeddings).

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let system: RunningSystem;
let hoster: RegisteredHoster;
beforeAll(async () => {
  system = await startSystem();
  hoster = await registerHoster(system, { model: { kind: "embedding" } });
});
afterAll(async () => {
  await hoster?.server.close();
  await system?.close();
});

/** A plan of the hoster's with `terms`, a new customer subscribed to it, and its scoped key. */
async function subscribe(terms: Record<string, unknown>): Promise<{ key: string; subscriptionId: string }> {
  const plan = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: { name: `plan ${String(terms.pricing_model)}`, ...terms },
  });
  expect(plan.status, JSON.stringify(plan.body)).toBe(201);
  const customer = await signUp(system.url);
  const subscription = await apiCall(system.url, "POST", "/v1/subscriptions", {
    key: customer.apiKey,
    body: { product_id: plan.body.product_id },
  });
  expect(subscription.status, JSON.stringify(subscription.body)).toBe(201);
  return { key: subscription.body.api_key as string, subscriptionId: subscription.body.subscription_id as string };
}

async function settled(key: string, id: string): Promise<Json> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const res = await fetch(`${system.url}/v1/generations/${id}`, { headers: { authorization: `Bearer ${key}` } });
    if (res.status === 200) return (await res.json()) as Json;
    if (Date.now() > deadline) throw new Error(`${id} never settled (${res.status})`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Embeds `text` on the scoped key; returns its billed input tokens and its settled generation. */
async function embed(key: string, text: string) {
  const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: key, maxRetries: 0 });
  const { data, response } = await client.embeddings
    .create({ model: hoster.modelId, input: text, encoding_format: "float" })
    .withResponse();
  expect(data.data[0]!.embedding.length).toBeGreaterThan(0);
  const requestId = response.headers.get("x-request-id")!;
  return {
    tokens: data.usage.prompt_tokens,
    cost: (data.usage as unknown as Json).cost,
    generation: await settled(key, requestId),
  };
}

const TEXT = "Embeddings on a subscription are priced by its plan, as its chats are.";

describe("embeddings on a subscription's scoped key", () => {
  it("payg: its input tokens at the plan's input price", async () => {
    const { key } = await subscribe({ pricing_model: "payg", input_price_per_1m_usd: 2, output_price_per_1m_usd: 4 });
    const { tokens, cost, generation } = await embed(key, TEXT);
    expect(tokens).toBe(countTextTokens(TEXT));
    // ceil(tokens × 2 micro-USD).
    const expected = (tokens * 2) / 1_000_000;
    expect(cost).toBe(expected);
    expect(generation).toMatchObject({
      provider: "hoster",
      input_tokens: tokens,
      output_tokens: 0,
      cost_usd: expected,
    });
  });

  it("free: nothing charged, the tokens still recorded", async () => {
    const { key } = await subscribe({ pricing_model: "free" });
    const { tokens, generation } = await embed(key, TEXT);
    expect(generation).toMatchObject({ input_tokens: tokens, cost_usd: 0, status: "success" });
  });

  it("subscription_overage: included tokens first, then the overage price on the rest", async () => {
    const tokens = countTextTokens(TEXT);
    const included = tokens + 5; // the first request fits, the second crosses
    const { key } = await subscribe({
      pricing_model: "subscription_overage",
      monthly_price_usd: 1,
      included_tokens: included,
      overage_price_per_1m_usd: 3,
    });
    const first = await embed(key, TEXT);
    expect(first.generation.cost_usd).toBe(0);
    const second = await embed(key, TEXT);
    // 5 included tokens were left: the other tokens − 5 pay 3 micro-USD each.
    expect(second.generation.cost_usd).toBe(((tokens - 5) * 3) / 1_000_000);
  });

  it("subscription: included tokens only; once they are gone, 429 included_tokens_exhausted", async () => {
    const tokens = countTextTokens(TEXT);
    const { key } = await subscribe({ pricing_model: "subscription", monthly_price_usd: 1, included_tokens: tokens });
    expect((await embed(key, TEXT)).generation.cost_usd).toBe(0);
    const over = await fetch(`${system.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: hoster.modelId, input: TEXT }),
    });
    expect(over.status).toBe(429);
    expect(((await over.json()) as Json).error.code).toBe("included_tokens_exhausted");
  });

  it("a scoped key reaches only its hoster's embedding models", async () => {
    const { key } = await subscribe({ pricing_model: "free" });
    const res = await fetch(`${system.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "demo-embed", input: TEXT }),
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as Json).error.code).toBe("model_not_found");
  });
});
