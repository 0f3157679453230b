import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { costMicros } from "@mkt/runtime/money";
import { loadHosterServerConfig } from "../../hoster-server/src/config.ts";
import { startHosterServer } from "../../hoster-server/src/server.ts";
import { apiCall, type Json } from "./api-call.ts";
import { REQUEST_CHARGE_SQL } from "../../services/billing/test/billing-harness.ts";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { DEMO_PRICES, signUp, startSystem, type RunningSystem } from "./system.ts";

// Every chat completion's usage carries `cost` (USD): what settlement posts for it, from the one
// cost function (docs/adr/0017-one-cost-function.md). Compared, for each pricing model, with the
// customer leg the ledger posted and GET /v1/generations/{id}, through the whole system.

const CLOUD_KEY = "sk-e2e-usage-cost-7f3a";
const CLOUD_UPSTREAM = "gpt-4o-mini-2024-07-18";
const OVERAGE_PRICE = 40n; // micro-USD a token (40 USD per 1M)

let cloud: Awaited<ReturnType<typeof startHosterServer>>;
let system: RunningSystem;
let db: BillingDb;
let hoster: RegisteredHoster;
let apiKey: string;
beforeAll(async () => {
  cloud = await startHosterServer(
    loadHosterServerConfig({
      HOST: "127.0.0.1",
      PORT: "0",
      HOSTER_SERVER_TOKEN: CLOUD_KEY,
      DEMO_MODELS: CLOUD_UPSTREAM,
    }),
    createLogger("cloud", "silent"),
  );
  system = await startSystem({
    registry: {
      CLOUD_BASE_URL: `${cloud.url}/v1`,
      CLOUD_API_KEY: CLOUD_KEY,
      CLOUD_MODELS: JSON.stringify([
        {
          model_id: "cloud-mini",
          context_window: 128_000,
          input_price_per_1m_usd: "3.00",
          output_price_per_1m_usd: "12.00",
          upstream_model: CLOUD_UPSTREAM,
        },
      ]),
    },
  });
  db = await openBillingDb(system.databaseUrl);
  hoster = await registerHoster(system, { name: "Usage Cost Hoster" });
  // The platform chats below leave the account's lease holding credit lent for them; the
  // subscription bought right after is paid once billing has recalled what they did not use.
  ({ apiKey } = await signUp(system.url));
});
afterAll(async () => {
  await db?.close();
  await hoster?.server.close();
  await system?.close();
  await cloud?.close();
});

type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number; cost: number };

const client = (key: string) => new OpenAI({ baseURL: `${system.url}/v1`, apiKey: key });
const micros = (usd: number) => BigInt(Math.round(usd * 1e6));

/** A chat completion's usage and request id: non-streamed, or a stream's include_usage chunk. */
async function chat(
  key: string,
  model: string,
  options: { stream?: boolean; prompt?: string; maxTokens?: number } = {},
): Promise<{ usage: Usage; requestId: string }> {
  const body = {
    model,
    messages: [{ role: "user" as const, content: options.prompt ?? "What does this request cost?" }],
    ...(options.maxTokens ? { max_tokens: options.maxTokens } : {}),
  };
  if (!options.stream) {
    const completion = await client(key).chat.completions.create(body);
    return { usage: completion.usage as unknown as Usage, requestId: completion.id.slice("chatcmpl-".length) };
  }
  const stream = await client(key).chat.completions.create({
    ...body,
    stream: true,
    stream_options: { include_usage: true },
  });
  let last: OpenAI.ChatCompletionChunk | undefined;
  for await (const chunk of stream) last = chunk;
  expect(last!.choices).toEqual([]);
  return { usage: last!.usage as unknown as Usage, requestId: last!.id.slice("chatcmpl-".length) };
}

/** GET /v1/generations/{id} once the request has settled. */
async function settled(key: string, requestId: string): Promise<Json> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const res = await apiCall(system.url, "GET", `/v1/generations/${requestId}`, { key });
    if (res.status === 200) return res.body;
    expect(res.status).toBe(404);
    if (Date.now() > deadline) throw new Error(`${requestId} never settled`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * What the ledger charged the customer for the request (0 when it posted nothing): its record's
 * cost, in its batch entry's customer leg (REQUEST_CHARGE_SQL).
 */
const posted = (requestId: string) => db.figure(REQUEST_CHARGE_SQL, [requestId]);

/** Asserts the answer's usage.cost is what settlement posted and what the generation shows; returns it in micro-USD. */
async function expectPostedCost(key: string, answer: { usage: Usage; requestId: string }): Promise<bigint> {
  expect(typeof answer.usage.cost).toBe("number");
  const generation = await settled(key, answer.requestId);
  expect(generation.cost_usd).toBe(answer.usage.cost);
  expect(micros(answer.usage.cost)).toBe(await posted(answer.requestId));
  return micros(answer.usage.cost);
}

async function scopedKey(plan: Json): Promise<string> {
  const created = await apiCall(system.url, "POST", "/hosters/products", { cookie: hoster.cookie, body: plan });
  expect(created.status).toBe(201);
  const subscribed = await apiCall(system.url, "POST", "/v1/subscriptions", {
    key: apiKey,
    body: { product_id: created.body.product_id },
  });
  expect(subscribed.status).toBe(201);
  return subscribed.body.api_key as string;
}

describe("usage.cost of platform models (an account key)", () => {
  it.each([
    ["non-streamed", false],
    ["streamed, in the include_usage chunk", true],
  ])("the local model, %s: the catalog price of the tokens", async (_, stream) => {
    const answer = await chat(apiKey, "demo-small", { stream });
    const cost = await expectPostedCost(apiKey, answer);
    const { prompt_tokens, completion_tokens } = answer.usage;
    expect(cost).toBe(
      costMicros(BigInt(prompt_tokens), BigInt(completion_tokens), DEMO_PRICES.input, DEMO_PRICES.output),
    );
    expect(cost).toBeGreaterThan(0n);
  });

  it("a cloud model at its own prices", async () => {
    const answer = await chat(apiKey, "cloud-mini");
    const cost = await expectPostedCost(apiKey, answer);
    const { prompt_tokens, completion_tokens } = answer.usage;
    expect(cost).toBe(costMicros(BigInt(prompt_tokens), BigInt(completion_tokens), 3_000_000n, 12_000_000n));
  });

  it("the Responses API carries the same cost in its usage", async () => {
    const res = await apiCall(system.url, "POST", "/v1/responses", {
      key: apiKey,
      body: { model: "demo-small", input: "What does a Response cost?" },
    });
    expect(res.status).toBe(200);
    const requestId = (res.body.id as string).slice("resp_".length);
    const { input_tokens, output_tokens, cost } = res.body.usage as Json;
    expect(micros(cost)).toBe(
      costMicros(BigInt(input_tokens), BigInt(output_tokens), DEMO_PRICES.input, DEMO_PRICES.output),
    );
    expect((await settled(apiKey, requestId)).cost_usd).toBe(cost);
    expect(micros(cost)).toBe(await posted(requestId));
  });
});

describe("usage.cost of a subscription's requests (its scoped key)", () => {
  it("payg: the plan's prices, never the route's", async () => {
    const key = await scopedKey({
      name: "Metered",
      pricing_model: "payg",
      input_price_per_1m_usd: 7,
      output_price_per_1m_usd: 21,
    });
    for (const stream of [false, true]) {
      const answer = await chat(key, hoster.modelId, { stream });
      const cost = await expectPostedCost(key, answer);
      const { prompt_tokens, completion_tokens } = answer.usage;
      expect(cost).toBe(costMicros(BigInt(prompt_tokens), BigInt(completion_tokens), 7_000_000n, 21_000_000n));
    }
  });

  it("free, and subscription within its included tokens: 0", async () => {
    const free = await scopedKey({ name: "Free tier", pricing_model: "free" });
    const included = await scopedKey({
      name: "Bundle",
      pricing_model: "subscription",
      monthly_price_usd: 0.5,
      included_tokens: 1_000_000,
    });
    for (const key of [free, included]) {
      for (const stream of [false, true]) {
        const answer = await chat(key, hoster.modelId, { stream });
        expect(answer.usage.cost).toBe(0);
        expect(await expectPostedCost(key, answer)).toBe(0n);
      }
    }
  });

  it("subscription_overage: 0 within the included tokens, then the overage price on the tokens beyond what each request took of them", async () => {
    const key = await scopedKey({
      name: "Bundle plus",
      pricing_model: "subscription_overage",
      monthly_price_usd: 0.5,
      included_tokens: 100,
      overage_price_per_1m_usd: Number(OVERAGE_PRICE),
    });
    // Well within the 100 included tokens.
    const within = await chat(key, hoster.modelId, { prompt: "Hi", maxTokens: 5 });
    expect(within.usage.total_tokens).toBeLessThan(50);
    expect(await expectPostedCost(key, within)).toBe(0n);

    // A prompt longer than what is left: the request takes the included tokens left and pays
    // for the rest (the split decided at admission, which settlement charges as the answer said).
    const long = "Tell me everything about the weather in Oslo, please. ".repeat(15);
    const crossing = await chat(key, hoster.modelId, { prompt: long, maxTokens: 8, stream: true });
    expect(crossing.usage.prompt_tokens).toBeGreaterThan(100);
    const crossingCost = await expectPostedCost(key, crossing);
    expect(crossingCost).toBeGreaterThan(0n);
    expect(crossingCost).toBeLessThan(BigInt(crossing.usage.total_tokens) * OVERAGE_PRICE);

    // None left: every token at the overage price.
    const beyond = await chat(key, hoster.modelId, { prompt: "And tomorrow?", maxTokens: 8 });
    expect(await expectPostedCost(key, beyond)).toBe(BigInt(beyond.usage.total_tokens) * OVERAGE_PRICE);
  });
});

it("documents usage.cost in the OpenAPI description of chat completions", async () => {
  const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as {
    paths: Record<string, { post?: { description?: string } }>;
  };
  expect(doc.paths["/v1/chat/completions"]!.post!.description).toContain("usage.cost");
});
