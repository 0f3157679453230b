import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall } from "./api-call.ts";
import { postChat } from "./billing-db.ts";
import { waitFor } from "../../services/registry/test/registry-harness.ts";

interface Figures {
  requests: number;
  uptime: number | null;
  latency_p50_ms: number | null;
}
type Stats = { last_30m: Figures; last_1d: Figures };

// GET /v1/models/{canonical_id}/endpoints: the hosters serving one public model on open plans,
// with OpenRouter's `author/slug` id taken as two path segments.

const LLAMA = "meta-llama/Llama-3.1-8B-Instruct";

let system: RunningSystem;
const hosters: RegisteredHoster[] = [];
let apiKey: string;

async function hosterWithPlans(name: string, model: Record<string, unknown>, plans: Array<Record<string, unknown>>) {
  const hoster = await registerHoster(system, { name, model });
  hosters.push(hoster);
  for (const plan of plans) {
    const res = await apiCall(system.url, "POST", "/hosters/products", { cookie: hoster.cookie, body: plan });
    expect(res.status).toBe(201);
  }
  return hoster;
}

const payg = (name: string, input: number, output: number, extra: Record<string, unknown> = {}) => ({
  name,
  pricing_model: "payg",
  input_price_per_1m_usd: input,
  output_price_per_1m_usd: output,
  open: true,
  ...extra,
});

beforeAll(async () => {
  system = await startSystem();
  apiKey = (await signUp(system.url)).apiKey;
});
afterAll(async () => {
  for (const hoster of hosters) await hoster.server.close();
  await system?.close();
});

const endpoints = (path: string, key = apiKey) =>
  fetch(`${system.url}/v1/models/${path}/endpoints`, { headers: { authorization: `Bearer ${key}` } });

describe("GET /v1/models/{canonical_id}/endpoints", () => {
  it("lists each hoster's model on each open plan, cheapest first, without the hoster's address or token", async () => {
    const dear = await hosterWithPlans("Dear GPUs", { canonical_id: LLAMA, quantization: "bf16" }, [
      payg("Dear open", 1, 3),
      // A plan that is not open is no endpoint.
      payg("Dear closed", 0.01, 0.01, { open: false }),
    ]);
    const cheap = await hosterWithPlans("Cheap GPUs", { canonical_id: LLAMA, quantization: "q4_k_m" }, [
      payg("Cheap open", 0.1, 0.2, { max_context_tokens: 4096, max_output_tokens: 512 }),
    ]);
    // Another model, and the same model with no open plan: neither is listed.
    await hosterWithPlans("Other GPUs", { canonical_id: "Qwen/Qwen2.5-7B-Instruct" }, [payg("Qwen open", 0.1, 0.1)]);
    await hosterWithPlans("Closed GPUs", { canonical_id: LLAMA }, [payg("Closed", 0.05, 0.05, { open: false })]);

    const res = await endpoints(LLAMA);
    expect(res.status).toBe(200);
    const text = await res.text();
    for (const hoster of hosters) {
      expect(text).not.toContain(hoster.server.token);
      expect(text).not.toContain(hoster.server.url);
    }
    const body = JSON.parse(text) as { data: { id: string; endpoints: Array<Record<string, unknown>> } };
    expect(body.data.id).toBe(LLAMA);
    expect(body.data.endpoints).toEqual([
      expect.objectContaining({
        hoster_id: cheap.hosterId,
        hoster_name: "Cheap GPUs",
        status: "healthy",
        model_id: cheap.modelId,
        quantization: "q4_k_m",
        context_window: 4096, // the plan's max_context_tokens, below the model's 8,192
        max_output_tokens: 512,
        input_price_per_1m_usd: 0.1,
        output_price_per_1m_usd: 0.2,
        plan: expect.objectContaining({ name: "Cheap open", pricing_model: "payg", open: true }),
      }),
      expect.objectContaining({
        hoster_id: dear.hosterId,
        quantization: "bf16",
        context_window: 8192,
        input_price_per_1m_usd: 1,
        output_price_per_1m_usd: 3,
        plan: expect.objectContaining({ name: "Dear open" }),
      }),
    ]);

    // The id matches without regard to case.
    const folded = await endpoints(LLAMA.toLowerCase());
    expect(((await folded.json()) as typeof body).data.endpoints).toHaveLength(2);
  });

  it("shows each endpoint's live figures from the answers it gave: the list, GET /v1/hosters and /hosters/me", async () => {
    const hoster = await hosterWithPlans("Busy GPUs", { canonical_id: "busy/model-1" }, [payg("Busy open", 0.1, 0.1)]);
    const listed = async () => {
      const res = await endpoints("busy/model-1");
      return ((await res.json()) as { data: { endpoints: Array<{ stats: Stats; plan: { product_id: string } }> } }).data
        .endpoints[0]!;
    };
    const before = await listed();
    expect(before.stats.last_30m).toMatchObject({ requests: 0, uptime: null, latency_p50_ms: null });
    // Until account keys are routed to open plans, a subscription's scoped key reaches it.
    const sub = await fetch(`${system.url}/v1/subscriptions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ product_id: before.plan.product_id }),
    });
    expect(sub.status).toBe(201);
    const scopedKey = ((await sub.json()) as { api_key: string }).api_key;
    for (let i = 0; i < 3; i++) {
      const chat = await postChat(system.url, scopedKey, {
        model: hoster.modelId,
        messages: [{ role: "user", content: `hello ${i}` }],
        max_tokens: 16,
      });
      expect(chat.status).toBe(200);
      await chat.text();
    }
    const after = await waitFor(listed, (e) => e.stats.last_30m.requests === 3);
    expect(after.stats.last_30m).toMatchObject({ requests: 3, successes: 3, faults: 0, upstream_429s: 0, uptime: 1 });
    expect(after.stats.last_30m.latency_p50_ms).toEqual(expect.any(Number));
    expect(after.stats.last_1d).toEqual(after.stats.last_30m);
    const all = await fetch(`${system.url}/v1/hosters`, { headers: { authorization: `Bearer ${apiKey}` } });
    const { data } = (await all.json()) as { data: Array<{ hoster_id: string; models: Array<{ stats: Stats }> }> };
    expect(data.find((h) => h.hoster_id === hoster.hosterId)!.models[0]!.stats).toEqual(after.stats);
    const me = await apiCall(system.url, "GET", "/hosters/me", { cookie: hoster.cookie });
    expect((me.body.models as Array<{ stats: Stats }>)[0]!.stats).toEqual(after.stats);
  });

  it("answers 404 model_not_found for a model no open plan serves, and 401 without a key", async () => {
    for (const path of ["nobody/serves-this", "plain-id", encodeURIComponent("a/b")]) {
      const res = await endpoints(path);
      expect(res.status, path).toBe(404);
      expect(await res.json()).toMatchObject({
        error: { type: "invalid_request_error", code: "model_not_found", param: "canonical_id" },
      });
    }
    expect((await fetch(`${system.url}/v1/models/${LLAMA}/endpoints`)).status).toBe(401);
  });
});
