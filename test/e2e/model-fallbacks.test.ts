import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { maximumPromptTokens } from "@mkt/runtime/token-bounds";
import {
  startAdversarialUpstream,
  type AdversarialUpstream,
} from "../../services/registry/test/fixtures/adversarial-upstream.ts";
import { apiCall } from "./api-call.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// A chat request's `models` fallbacks (OpenRouter's convention) through the whole system: the
// local models are modes of a hostile upstream (`ok` answers, `reset-mid` dies after two
// chunks; `ok-tiny` answers as `ok` does, within a 64-token context); the cloud model `cloud-down` is dearer and its only upstream is down (nothing listens
// there). Two hosters and a subscription to the first give a scoped key.

const LOCAL_PRICES = { input: 500_000n, output: 1_500_000n };
const CLOUD_PRICES = { input: 3_000_000n, output: 12_000_000n };

let upstream: AdversarialUpstream;
let system: RunningSystem;
let db: BillingDb;
let hosterA: RegisteredHoster;
let hosterB: RegisteredHoster;
let scopedKey: string;

beforeAll(async () => {
  upstream = await startAdversarialUpstream();
  const local = (mode: string, modelId = mode, contextWindow = 8192) => ({
    model_id: modelId,
    context_window: contextWindow,
    input_price_per_1m_usd: "0.50",
    output_price_per_1m_usd: "1.50",
    upstream_model: mode,
  });
  system = await startSystem({
    registry: {
      LOCAL_MODEL_URL: upstream.url,
      LOCAL_MODEL_TOKEN: upstream.token,
      LOCAL_MODELS: JSON.stringify([local("ok"), local("reset-mid"), local("ok", "ok-tiny", 64)]),
      CLOUD_BASE_URL: `${upstream.refusedUrl}/v1`,
      CLOUD_API_KEY: "sk-e2e-cloud-unreachable",
      CLOUD_MODELS: JSON.stringify([
        {
          model_id: "cloud-down",
          context_window: 128_000,
          input_price_per_1m_usd: "3.00",
          output_price_per_1m_usd: "12.00",
          upstream_model: "gpt-4o-mini",
        },
      ]),
    },
  });
  db = await openBillingDb(system.databaseUrl);
  hosterA = await registerHoster(system, { name: "Fallback Hoster A" });
  hosterB = await registerHoster(system, { name: "Fallback Hoster B" });
  const plan = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hosterA.cookie,
    body: { name: "Free", pricing_model: "free" },
  });
  expect(plan.status).toBe(201);
  const customer = await signUp(system.url);
  const subscription = await apiCall(system.url, "POST", "/v1/subscriptions", {
    key: customer.apiKey,
    body: { product_id: plan.body.product_id },
  });
  expect(subscription.status).toBe(201);
  scopedKey = subscription.body.api_key as string;
});
afterAll(async () => {
  await db?.close();
  await system?.close();
  await upstream?.close();
  await hosterA?.server.close();
  await hosterB?.server.close();
});

/** The settled request: its usage record and the worst case its settlement released from the hold. */
async function settled(requestId: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [record] = await db.query<{
      model_id: string;
      provider: string;
      success: boolean;
      error_code: string;
      input_tokens: string;
      output_tokens: string;
      cost_micros: string;
      worst_case_micros: string;
    }>(
      `select model_id, provider, success, error_code, input_tokens::text, output_tokens::text, cost_micros::text,
         (select coalesce(sum(settled_micros), 0)::text from leases l where l.account_id = u.account_id)
           as worst_case_micros
       from usage_records u where request_id = $1`,
      [requestId],
    );
    if (record) return record;
    if (Date.now() > deadline) throw new Error(`request ${requestId} never settled`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const okCalls = () => upstream.requests.filter((r) => r.mode === "ok").length;
const messages = [{ role: "user", content: "Say hello" }];

describe("fallbacks before the first byte (`models`)", () => {
  it("answers from the second model when the first's only upstream is down, charging the one that answered", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });
    const before = okCalls();
    // The SDK's types require `model`; `models` travels as an extra field, its fallbacks.
    const params = { model: "cloud-down", models: ["ok"], messages, max_tokens: 50 };
    const { data: completion, response } = await client.chat.completions
      .create(params as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .withResponse();
    expect(completion.model).toBe("ok");
    expect(completion.choices[0]!.message.content).toBe("Hello there, friend!");
    expect(okCalls()).toBe(before + 1);
    expect(upstream.last("ok")!.body).not.toHaveProperty("models");

    const usage = completion.usage!;
    const charged = costMicros(
      BigInt(usage.prompt_tokens),
      BigInt(usage.completion_tokens),
      LOCAL_PRICES.input,
      LOCAL_PRICES.output,
    );
    const record = await settled(response.headers.get("x-request-id")!);
    expect(record).toMatchObject({ model_id: "ok", provider: "local", success: true, cost_micros: String(charged) });
    // The hold was the dearest candidate's worst case (the cloud model's, had it answered), on
    // the prompt's byte bound: the short prompt was admitted without being counted first.
    const bound = BigInt(maximumPromptTokens(messages));
    expect(bound).toBeGreaterThan(BigInt(usage.prompt_tokens));
    expect(record.worst_case_micros).toBe(String(costMicros(bound, 50n, CLOUD_PRICES.input, CLOUD_PRICES.output)));
    const balance = await apiCall(system.url, "GET", "/v1/usage", { key: apiKey });
    expect(Math.round((balance.body.credit_balance_usd as number) * 1e6)).toBe(5_000_000 - Number(charged));
  });

  it("streams the fallback's answer, every chunk naming it, with `models` alone", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await postChat(system.url, apiKey, { models: ["cloud-down", "ok"], messages, stream: true });
    expect(res.status).toBe(200);
    const chunks = (await res.text())
      .split("\n\n")
      .filter((frame) => frame.startsWith("data: {"))
      .map((frame) => JSON.parse(frame.slice("data: ".length)) as { model: string });
    expect(chunks.length).toBeGreaterThan(0);
    expect(new Set(chunks.map((c) => c.model))).toEqual(new Set(["ok"]));
    expect((await settled(res.headers.get("x-request-id")!)).model_id).toBe("ok");
  });

  it("never falls back once the first byte reached the client: the stream ends with an error event", async () => {
    const { apiKey } = await signUp(system.url);
    const before = okCalls();
    // The first is down, so the second starts answering; it dies after two chunks, and `ok` is never asked.
    const res = await postChat(system.url, apiKey, {
      models: ["cloud-down", "reset-mid", "ok"],
      messages,
      stream: true,
    });
    expect(res.status).toBe(200);
    const events = (await res.text()).split("\n\n").filter((frame) => frame.startsWith("data: "));
    expect(events).not.toContain("data: [DONE]");
    const chunks = events.map((e) => JSON.parse(e.slice("data: ".length)) as Record<string, unknown>);
    expect(chunks.at(-1)).toMatchObject({
      model: "reset-mid",
      choices: [{ finish_reason: "error" }],
      error: { code: "upstream_error" },
    });
    expect(new Set(chunks.map((c) => c.model))).toEqual(new Set(["reset-mid"]));
    expect(okCalls()).toBe(before);
    const record = await settled(res.headers.get("x-request-id")!);
    expect(record).toMatchObject({ model_id: "reset-mid", success: false, error_code: "upstream_error" });
    expect(BigInt(record.cost_micros)).toBeGreaterThan(0n);
  });
  it("passes over a model the prompt does not fit; when none fits, the first one's 400 stands", async () => {
    const { apiKey } = await signUp(system.url);
    const long = [{ role: "user", content: "Tell me a long story about ".repeat(20) }];
    const served = await apiCall(system.url, "POST", "/v1/chat/completions", {
      key: apiKey,
      body: { models: ["ok-tiny", "ok"], messages: long, max_tokens: 20 },
    });
    expect(served.status).toBe(200);
    expect(served.body.model).toBe("ok");
    const refused = await apiCall(system.url, "POST", "/v1/chat/completions", {
      key: apiKey,
      body: { models: ["ok-tiny"], messages: long, max_tokens: 20 },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toMatchObject({ code: "context_length_exceeded", param: "messages" });
  });
});

it("is in the OpenAPI document, with an example", async () => {
  const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as {
    paths: Record<string, { post: { requestBody: { content: Record<string, { schema: { properties: object } }> } } }>;
  };
  const body = doc.paths["/v1/chat/completions"]!.post.requestBody.content["application/json"]!.schema;
  expect(body.properties).toMatchObject({
    models: { type: "array", minItems: 1, maxItems: 5, example: ["demo-small", "cloud-mini"] },
  });
});

describe("a `models` list that cannot be served", () => {
  const chat = (key: string, body: Record<string, unknown>) =>
    apiCall(system.url, "POST", "/v1/chat/completions", { key, body: { messages, max_tokens: 5, ...body } });

  it.each([
    ["an empty list", { models: [] }, "models"],
    ["six models", { models: ["ok", "reset-mid", "cloud-down", "a", "b", "c"] }, "models"],
    ["`model` and five other models", { model: "ok", models: ["reset-mid", "cloud-down", "a", "b", "c"] }, "models"],
    ["an entry that is not a name", { models: ["ok", 3] }, "models[1]"],
    ["neither `model` nor `models`", {}, "model"],
  ])("is 400 for %s", async (_case, body, param) => {
    const { apiKey } = await signUp(system.url);
    const res = await chat(apiKey, body);
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request", param });
  });

  it("is 404 model_not_found naming an unknown model, even when an earlier one would answer", async () => {
    const { apiKey } = await signUp(system.url);
    const before = okCalls();
    const res = await chat(apiKey, { models: ["ok", "no-such-model"] });
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: "model_not_found", param: "models" });
    expect(res.body.error.message).toContain("no-such-model");
    expect(okCalls()).toBe(before);
  });

  it("keeps a scoped key to its hoster's models: another hoster's or a platform model is 404 naming it", async () => {
    const own = await chat(scopedKey, { models: [hosterA.modelId] });
    expect(own.status).toBe(200);
    expect(own.body.model).toBe(hosterA.modelId);
    for (const other of [hosterB.modelId, "ok"]) {
      const res = await chat(scopedKey, { models: [hosterA.modelId, other] });
      expect(res.status).toBe(404);
      expect(res.body.error).toMatchObject({ code: "model_not_found", param: "models" });
      expect(res.body.error.message).toContain(other);
    }
  });
});
