import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { costMicros } from "@mkt/runtime/money";
import { loadHosterServerConfig } from "../../hoster-server/src/config.ts";
import { startHosterServer } from "../../hoster-server/src/server.ts";
import { openBillingDb } from "./billing-db.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// The reference hoster server's demo plays the cloud API: it answers only with this bearer key
// and only for its upstream model name, so a successful call proves both were sent.
const CLOUD_KEY = "sk-e2e-cloud-SECRET-0c9d2a";
const UPSTREAM_MODEL = "gpt-4o-mini-2024-07-18";
const CLOUD_PRICES = { input: 3_000_000n, output: 12_000_000n }; // micro-USD per 1M tokens

let cloud: Awaited<ReturnType<typeof startHosterServer>>;
let system: RunningSystem;
beforeAll(async () => {
  cloud = await startHosterServer(
    loadHosterServerConfig({
      HOST: "127.0.0.1",
      PORT: "0",
      HOSTER_SERVER_TOKEN: CLOUD_KEY,
      DEMO_MODELS: UPSTREAM_MODEL,
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
          model_alias: "Cloud Mini",
          context_window: 128_000,
          input_price_per_1m_usd: "3.00",
          output_price_per_1m_usd: "12.00",
          upstream_model: UPSTREAM_MODEL,
        },
      ]),
    },
  });
});
afterAll(async () => {
  await system?.close();
  await cloud?.close();
});

async function getJson<T>(path: string, apiKey: string): Promise<{ body: T; text: string }> {
  const res = await fetch(`${system.url}${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return { body: JSON.parse(text) as T, text };
}

describe("a cloud model through the edge", () => {
  it("is listed, charged exactly its catalog price as platform revenue, and counted as cloud", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });

    const models = await getJson<{ data: Array<Record<string, unknown>> }>("/v1/models", apiKey);
    // The models themselves, then the operator's aliases of them (listed with `alias_for`).
    const served = models.body.data.filter((m) => m.alias_for === undefined);
    expect(served.map((m) => m.id)).toEqual(["demo-small", "demo-agent", "demo-embed", "cloud-mini"]);
    expect(served[3]).toMatchObject({
      id: "cloud-mini",
      object: "model",
      owned_by: "platform",
      name: "Cloud Mini",
      provider: "cloud",
      context_window: 128_000,
    });

    const completion = await client.chat.completions.create({
      model: "cloud-mini",
      messages: [{ role: "user", content: "Hello from the cloud test." }],
      max_tokens: 30,
    });
    expect(completion.model).toBe("cloud-mini");
    expect(completion.choices[0]!.message.content!.length).toBeGreaterThan(0);
    const stream = await client.chat.completions.create({
      model: "Cloud Mini",
      messages: [{ role: "user", content: "Stream it, please." }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let streamed: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      expect(chunk.model).toBe("cloud-mini");
      streamed = chunk.usage ?? streamed;
    }
    const usages = [completion.usage!, streamed!];
    const cost = usages.reduce(
      (sum, u) =>
        sum + costMicros(BigInt(u.prompt_tokens), BigInt(u.completion_tokens), CLOUD_PRICES.input, CLOUD_PRICES.output),
      0n,
    );
    expect(cost).toBeGreaterThan(0n);
    const inputTokens = usages.reduce((sum, u) => sum + u.prompt_tokens, 0);
    const outputTokens = usages.reduce((sum, u) => sum + u.completion_tokens, 0);

    const usage = await waitForUsage<{
      credit_balance_usd: number;
      usage_30d: { total_requests: number; total_cost_microdollars: number };
    }>(system.url, apiKey, (u) => u.usage_30d.total_requests === 2);
    expect(usage.usage_30d.total_cost_microdollars).toBe(Number(cost));
    expect(Math.round(usage.credit_balance_usd * 1e6)).toBe(5_000_000 - Number(cost));

    const breakdown = await getJson<{ by_model: Array<Record<string, unknown>> }>("/v1/usage/breakdown?days=1", apiKey);
    expect(breakdown.body.by_model).toEqual([
      {
        model_id: "cloud-mini",
        provider: "cloud",
        requests: 2,
        input_tokens: inputTokens,
        // The cloud test upstream reports no cached tokens.
        cached_input_tokens: 0,
        output_tokens: outputTokens,
        total_cost_usd: Number(cost) / 1e6,
        // A cloud model's cost is all platform fee: no hoster earns a share.
        platform_fee_usd: Number(cost) / 1e6,
        hoster_earned_usd: 0,
        avg_latency_ms: expect.any(Number),
      },
    ]);

    // The ledger agrees: the whole charge is posted to platform revenue, nothing to any hoster
    // (these are the only requests this system has served so far).
    const db = await openBillingDb(system.databaseUrl);
    try {
      const postings = (account: string) =>
        db.figure(
          `select sum(p.amount_micros)::text as v from ledger_postings p join journal_entries e on e.id = p.entry_id
           where e.kind in ('usage', 'usage_batch') and p.ledger_account like $1`,
          [account],
        );
      expect(await postings("customer:%")).toBe(-cost);
      expect(await postings("platform:revenue")).toBe(cost);
      expect(await postings("hoster:%")).toBe(0n);
    } finally {
      await db.close();
    }

    const tokens = await getJson<{
      timeseries: Array<{ local_requests: number; hoster_requests: number; cloud_requests: number }>;
    }>("/v1/usage/tokens?days=1&interval=day", apiKey);
    const sum = (field: "local_requests" | "hoster_requests" | "cloud_requests") =>
      tokens.body.timeseries.reduce((total, bucket) => total + bucket[field], 0);
    expect([sum("cloud_requests"), sum("local_requests"), sum("hoster_requests")]).toEqual([2, 0, 0]);

    // The key reached the cloud server (it answered) and appears in no response.
    for (const text of [models.text, JSON.stringify(completion), breakdown.text, tokens.text]) {
      expect(text).not.toContain(CLOUD_KEY);
    }
  });

  it('keeps "auto" on the local model', async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });
    const completion = await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "Which model?" }],
      max_tokens: 5,
    });
    expect(completion.model).toBe("demo-small");
  });
});
