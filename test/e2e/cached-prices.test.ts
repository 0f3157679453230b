import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../services/registry/test/registry-harness.ts";
import { apiCall, type Json } from "./api-call.ts";
import { registerOpenHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Cached input's own price where customers compare prices and where they pay: GET /v1/models and
// the endpoints list show OpenRouter's `pricing.input_cache_read` on a platform model, an open
// model and each endpoint; an open model's second turn, partly served from the demo model's prefix
// cache, is charged the cached price of the endpoint that served it, to the micro-dollar.

const OPEN = "acme/cached-8b";
const LOCAL_MODELS = JSON.stringify([
  {
    model_id: "demo-small",
    context_window: 8192,
    input_price_per_1m_usd: "0.50",
    cached_input_price_per_1m_usd: "0.05",
    output_price_per_1m_usd: "1.50",
  },
  { model_id: "demo-plain", context_window: 8192, input_price_per_1m_usd: "0.20", output_price_per_1m_usd: "0.40" },
]);

/**
 * Three endpoints of one open model, micro-USD per 1M tokens: a tenth for cached input, cached
 * input free (an explicit 0 is a price), and no cached price (cached input at the input price).
 */
const ENDPOINTS = [
  { name: "Tenth GPUs", input: 400_000n, output: 400_000n, cached: 40_000n },
  { name: "Free Cache GPUs", input: 600_000n, output: 600_000n, cached: 0n },
  { name: "Full Price GPUs", input: 500_000n, output: 500_000n, cached: undefined },
] as const;

const usd = (micros: bigint) => Number(micros) / 1_000_000;

let system: RunningSystem;
let apiKey: string;
const hosters: RegisteredHoster[] = [];

beforeAll(async () => {
  system = await startSystem({ registry: { LOCAL_MODELS, VERIFY_INTERVAL_MS: "86400000" } });
  apiKey = (await signUp(system.url)).apiKey;
  for (const e of ENDPOINTS) {
    hosters.push(
      await registerOpenHoster(system, {
        name: e.name,
        canonicalId: OPEN,
        modelId: `cached-${hosters.length}.gguf`,
        plan: {
          input_price_per_1m_usd: usd(e.input),
          output_price_per_1m_usd: usd(e.output),
          ...(e.cached !== undefined && { cached_input_price_per_1m_usd: usd(e.cached) }),
        },
      }),
    );
  }
  // The edge routes to every endpoint once each answers a request pinned to it.
  for (const hoster of hosters) {
    await waitFor(
      () => chat([{ role: "user", content: "hi" }], { provider: { only: [hoster.hosterId] } }),
      (res) => res.status === 200,
    );
  }
}, 60_000);
afterAll(async () => {
  for (const hoster of hosters) await hoster.server.close();
  await system?.close();
});

function chat(messages: Json[], extra: Json = {}) {
  return apiCall(system.url, "POST", "/v1/chat/completions", {
    key: apiKey,
    body: { model: OPEN, messages, max_tokens: 16, ...extra },
  });
}

describe("cached input prices shown", () => {
  it("GET /v1/models shows pricing.input_cache_read on platform models and an open model (its lowest)", async () => {
    const list = await apiCall(system.url, "GET", "/v1/models", { key: apiKey });
    expect(list.status).toBe(200);
    const byId = new Map((list.body.data as Json[]).map((m) => [m.id, m]));
    // USD per token, as OpenRouter's strings: 0.05 USD per 1M is 0.00000005 per token.
    expect(byId.get("demo-small")!.pricing).toEqual({
      prompt: "0.0000005",
      completion: "0.0000015",
      input_cache_read: "0.00000005",
    });
    // No cached price configured: a cache read costs the input price.
    expect(byId.get("demo-plain")!.pricing).toEqual({
      prompt: "0.0000002",
      completion: "0.0000004",
      input_cache_read: "0.0000002",
    });
    // Each the lowest among the endpoints: the free cache's 0 is the lowest cache read.
    expect(byId.get(OPEN)).toMatchObject({
      endpoints: 3,
      lowest_input_price_per_1m_usd: 0.4,
      lowest_cached_input_price_per_1m_usd: 0,
      pricing: { prompt: "0.0000004", completion: "0.0000004", input_cache_read: "0" },
    });
  });

  it("the endpoints list shows each endpoint's cached price, its input price where its plan sets none", async () => {
    const res = await apiCall(system.url, "GET", `/v1/models/${OPEN}/endpoints`, { key: apiKey });
    expect(res.status).toBe(200);
    const shown = (res.body.data.endpoints as Json[]).map((e) => ({
      hoster: e.hoster_name,
      cached: e.cached_input_price_per_1m_usd,
      planCached: e.plan.cached_input_price_per_1m_usd,
      pricing: e.pricing,
    }));
    expect(shown).toEqual([
      {
        hoster: "Tenth GPUs",
        cached: 0.04,
        planCached: 0.04,
        pricing: { prompt: "0.0000004", completion: "0.0000004", input_cache_read: "0.00000004" },
      },
      {
        hoster: "Full Price GPUs",
        cached: 0.5,
        planCached: null,
        pricing: { prompt: "0.0000005", completion: "0.0000005", input_cache_read: "0.0000005" },
      },
      {
        hoster: "Free Cache GPUs",
        cached: 0,
        planCached: 0,
        pricing: { prompt: "0.0000006", completion: "0.0000006", input_cache_read: "0" },
      },
    ]);
  });
});

/** The cost rule: ceil(((input − cached) × input price + cached × cached price + output × output price) / 1M). */
function expectedCostUsd(usage: Json, prices: (typeof ENDPOINTS)[number]): number {
  const input = BigInt(usage.prompt_tokens as number);
  const cached = BigInt(usage.prompt_tokens_details.cached_tokens as number);
  const output = BigInt(usage.completion_tokens as number);
  const scaled = (input - cached) * prices.input + cached * (prices.cached ?? prices.input) + output * prices.output;
  return usd((scaled + 999_999n) / 1_000_000n);
}

/**
 * A two-turn conversation: the second resends the first with the answer, so the demo model's
 * prefix cache serves its leading messages. Returns the second turn's answer.
 */
async function secondTurn(tag: string, extra: Json): Promise<Json> {
  const messages: Json[] = [
    { role: "system", content: `You answer questions about ${tag}. ` + "Keep every answer short. ".repeat(60) },
    { role: "user", content: `What is ${tag}?` },
  ];
  const first = await chat(messages, extra);
  expect(first.status, JSON.stringify(first.body)).toBe(200);
  messages.push({ role: "assistant", content: first.body.choices[0].message.content });
  messages.push({ role: "user", content: "And why does it matter?" });
  const second = await chat(messages, extra);
  expect(second.status, JSON.stringify(second.body)).toBe(200);
  // A conversation with a key stays on its endpoint, where its cache is.
  expect(second.body.model).toBe(first.body.model);
  return second.body;
}

/** The settled request, as GET /v1/generations/{id} shows it. */
async function generation(id: string): Promise<Json> {
  const res = await waitFor(
    () => apiCall(system.url, "GET", `/v1/generations/${id}`, { key: apiKey }),
    (r) => r.status === 200,
    15_000,
  );
  return res.body;
}

describe("a cached turn on an open model", () => {
  it.each(ENDPOINTS.map((e, i) => [e.name, i] as const))(
    "is charged %s's cached price, to the micro-dollar",
    async (_name, i) => {
      const hoster = hosters[i]!;
      const answer = await secondTurn(`endpoint ${i}`, {
        prompt_cache_key: `cached-prices-${i}`,
        provider: { only: [hoster.hosterId] },
      });
      expect(answer.model).toBe(hoster.modelId);
      const usage = answer.usage as Json;
      expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
      expect(usage.prompt_tokens_details.cached_tokens).toBeLessThan(usage.prompt_tokens);
      const cost = expectedCostUsd(usage, ENDPOINTS[i]!);
      expect(usage.cost).toBe(cost);
      expect(await generation(answer.id as string)).toMatchObject({
        hoster_id: hoster.hosterId,
        input_tokens: usage.prompt_tokens,
        cached_tokens: usage.prompt_tokens_details.cached_tokens,
        output_tokens: usage.completion_tokens,
        cost_usd: cost,
      });
    },
  );

  it("is charged the cached price of whichever endpoint the conversation's key keeps it on", async () => {
    const answer = await secondTurn("a routed conversation", { prompt_cache_key: "cached-prices-routed" });
    const i = hosters.findIndex((h) => h.modelId === answer.model);
    expect(i).toBeGreaterThanOrEqual(0);
    const usage = answer.usage as Json;
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(usage.cost).toBe(expectedCostUsd(usage, ENDPOINTS[i]!));
    expect((await generation(answer.id as string)).cost_usd).toBe(usage.cost);
  });
});
