import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAdversarialUpstream } from "../../services/registry/test/fixtures/adversarial-upstream.ts";
import { waitFor } from "../../services/registry/test/registry-harness.ts";
import { apiCall } from "./api-call.ts";
import { postChat } from "./billing-db.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Account keys calling an open model by its canonical_id: the default rule's shares, the
// `provider` preferences, failover between endpoints, implicit subscriptions and their earnings.

const SHARED = "acme/shared-8b";
const FAILING = "acme/failing-8b";

let system: RunningSystem;
let adversarial: Awaited<ReturnType<typeof startAdversarialUpstream>>;
const hosters: RegisteredHoster[] = [];
/** The three hosters of SHARED, at 1, 2 and 4 USD per 1M tokens (input and output together). */
let one: RegisteredHoster;
let two: RegisteredHoster;
let four: RegisteredHoster;
let apiKey: string;

async function openHoster(
  name: string,
  canonicalId: string,
  pricePer1m: number,
  options: { modelId?: string; quantization?: string; onAdversarial?: boolean } = {},
) {
  const hoster = await registerHoster(system, {
    name,
    modelId: options.modelId,
    model: { canonical_id: canonicalId, quantization: options.quantization ?? "bf16" },
    startServer: options.onAdversarial
      ? async () => ({ url: adversarial.url, token: adversarial.token, close: async () => {} })
      : undefined,
  });
  hosters.push(hoster);
  const plan = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: {
      name: `${name} open`,
      pricing_model: "payg",
      input_price_per_1m_usd: pricePer1m / 2,
      output_price_per_1m_usd: pricePer1m / 2,
      rpm_limit: 5_000,
      tpm_limit: 1_000_000,
      max_concurrent: 50,
      open: true,
    },
  });
  expect(plan.status).toBe(201);
  return hoster;
}

/** A chat answer, or an error in OpenAI's shape. */
interface Answer {
  id: string;
  model: string;
  usage: { prompt_tokens: number; completion_tokens: number; cost: number };
  error: { code: string; type: string; param: string | null; message: string };
}

/** Which hoster served an answer: the answer's `model` is the hoster's own model id. */
async function servedBy(body: Record<string, unknown>, key = apiKey): Promise<{ status: number; json: Answer }> {
  const res = await postChat(system.url, key, {
    messages: [{ role: "user", content: "hello" }],
    max_tokens: 4,
    ...body,
  });
  return { status: res.status, json: (await res.json()) as Answer };
}

beforeAll(async () => {
  adversarial = await startAdversarialUpstream();
  // Room for the shares' 500 requests in a minute: the account's tier and each plan's limit.
  system = await startSystem({
    billing: { TIERS: JSON.stringify({ free: { limit_per_minute: 5_000, limit_per_day: 50_000 } }) },
  });
  apiKey = (await signUp(system.url)).apiKey;
  one = await openHoster("One Dollar", SHARED, 1, { quantization: "q4_k_m" });
  two = await openHoster("Two Dollars", SHARED, 2, { quantization: "fp8" });
  four = await openHoster("Four Dollars", SHARED, 4);
  // Registration announces each change; the edge's table has them once the model resolves.
  await waitFor(
    async () =>
      (await fetch(`${system.url}/v1/models/${SHARED}/endpoints`, { headers: { authorization: `Bearer ${apiKey}` } }))
        .status,
    (status) => status === 200,
  );
});
afterAll(async () => {
  for (const hoster of hosters) await hoster.server.close();
  await system?.close();
  await adversarial?.close();
});

describe("open models called with an account key", () => {
  it("shares requests by the default rule: 16/21, 4/21 and 1/21 for prices 1, 2 and 4", async () => {
    const counts = new Map<string, number>();
    const total = 500;
    let next = 0;
    const worker = async () => {
      while (next < total) {
        next++;
        const { status, json } = await servedBy({ model: SHARED });
        expect(status).toBe(200);
        counts.set(json.model, (counts.get(json.model) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    const share = (h: RegisteredHoster) => (counts.get(h.modelId) ?? 0) / total;
    expect(Math.abs(share(one) - 16 / 21)).toBeLessThan(0.07);
    expect(Math.abs(share(two) - 4 / 21)).toBeLessThan(0.07);
    expect(Math.abs(share(four) - 1 / 21)).toBeLessThan(0.07);
  });

  it("made one implicit subscription per hoster, shown with origin open, and pays each hoster 80%", async () => {
    const subs = await apiCall(system.url, "GET", "/v1/subscriptions", { key: apiKey });
    expect(subs.status).toBe(200);
    const data = subs.body.data as Array<Record<string, unknown>>;
    const open = data.filter((s) => s.origin === "open");
    expect(open.map((s) => s.hoster_id).sort()).toEqual([one.hosterId, two.hosterId, four.hosterId].sort());
    for (const s of open) expect(s).toMatchObject({ status: "active", pricing_model: "payg" });
  });

  it("gives a scoped key for the implicit subscription on POST /v1/subscriptions, once", async () => {
    const subs = await apiCall(system.url, "GET", "/v1/subscriptions", { key: apiKey });
    const ofTwo = (subs.body.data as Array<Record<string, string>>).find((s) => s.hoster_id === two.hosterId)!;
    const made = await apiCall(system.url, "POST", "/v1/subscriptions", {
      key: apiKey,
      body: { product_id: ofTwo.product_id },
    });
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ subscription_id: ofTwo.subscription_id, origin: "open", status: "active" });
    const scoped = made.body.api_key as string;
    const answer = await servedBy({ model: two.modelId }, scoped);
    expect(answer.status).toBe(200);
    const again = await apiCall(system.url, "POST", "/v1/subscriptions", {
      key: apiKey,
      body: { product_id: ofTwo.product_id },
    });
    expect(again.status).toBe(409);
  });

  it("honours provider.only, ignore, order, max_price, quantizations and allow_fallbacks", async () => {
    for (let i = 0; i < 5; i++) {
      expect((await servedBy({ model: SHARED, provider: { only: ["four dollars"] } })).json.model).toBe(four.modelId);
      const notOne = (await servedBy({ model: SHARED, provider: { ignore: [one.hosterId] } })).json.model;
      expect([two.modelId, four.modelId]).toContain(notOne);
      expect((await servedBy({ model: SHARED, provider: { order: ["Four Dollars", "One Dollar"] } })).json.model).toBe(
        four.modelId,
      );
      expect((await servedBy({ model: SHARED, provider: { max_price: { prompt: 1.5 } } })).json.model).not.toBe(
        four.modelId,
      );
      expect((await servedBy({ model: SHARED, provider: { quantizations: ["fp8"] } })).json.model).toBe(two.modelId);
      expect((await servedBy({ model: `${SHARED}:floor` })).json.model).toBe(one.modelId);
      expect((await servedBy({ model: SHARED, provider: { sort: "price" } })).json.model).toBe(one.modelId);
    }
    const none = await servedBy({ model: SHARED, provider: { max_price: { prompt: 0.1 } } });
    expect(none.status).toBe(404);
    expect(none.json.error).toMatchObject({ code: "model_not_found", param: "provider" });
  });

  it("refuses an unknown provider field with a 400 naming it", async () => {
    const res = await servedBy({ model: SHARED, provider: { data_collection: "deny" } });
    expect(res.status).toBe(400);
    expect(res.json.error).toMatchObject({ type: "invalid_request_error", param: "provider.data_collection" });
    expect(res.json.error.message).toContain("data_collection");
  });

  it("fails over to the next endpoint before the first byte, charged that one's price; not with allow_fallbacks false", async () => {
    await openHoster("Broken Cheap", FAILING, 1, { modelId: "status-500", onAdversarial: true });
    const fine = await openHoster("Fine Dear", FAILING, 4, { modelId: "ok", onAdversarial: true });
    // Both are in this edge's routing table once a request naming each is routed: `n` 2 (these
    // models answer one choice) is then a 400 naming `n`, not a 404 naming `provider`.
    for (const name of ["Broken Cheap", "Fine Dear"]) {
      await waitFor(
        () => servedBy({ model: FAILING, n: 2, provider: { only: [name] } }),
        (res) => res.status === 400,
      );
    }
    const pinned = await servedBy({ model: FAILING, provider: { order: ["Broken Cheap"], allow_fallbacks: false } });
    expect(pinned.status).toBe(502);
    const served = await servedBy({ model: FAILING, provider: { order: ["Broken Cheap", "Fine Dear"] } });
    expect(served.status, JSON.stringify(served.json)).toBe(200);
    expect(served.json.model).toBe("ok");
    // Charged at Fine Dear's 4 USD per 1M (2 input, 2 output).
    const { prompt_tokens, completion_tokens, cost } = served.json.usage;
    expect(cost).toBeCloseTo(((prompt_tokens + completion_tokens) * 2) / 1_000_000, 9);
    const generation = await waitFor(
      () => apiCall(system.url, "GET", `/v1/generations/${served.json.id}`, { key: apiKey }),
      (res) => res.status === 200,
    );
    expect(generation.body).toMatchObject({ hoster_id: fine.hosterId, cost_usd: cost });
    // The one request Fine Dear served earns it 80% (the platform's 20% rounded down), on its
    // implicit subscription's open plan.
    const micros = BigInt(Math.round(cost * 1_000_000));
    const earned = micros - (micros * 20n) / 100n;
    const earnings = await waitFor(
      () => apiCall(system.url, "GET", "/v1/earnings/by-model", { cookie: fine.cookie }),
      (res) => (res.body.by_model as unknown[] | undefined)?.length === 1,
    );
    expect(earnings.body.by_model).toEqual([
      expect.objectContaining({ model_id: "ok", requests: 1, gross_usd: cost, earned_usd: Number(earned) / 1_000_000 }),
    ]);
  });

  it("takes a hoster's paused implicit subscriber out of that account's routing; pinned to it, the pause message", async () => {
    const subs = await apiCall(system.url, "GET", "/v1/subscriptions", { key: apiKey });
    const ofOne = (subs.body.data as Array<Record<string, string>>).find(
      (s) => s.origin === "open" && s.hoster_id === one.hosterId,
    )!;
    const paused = await apiCall(system.url, "POST", `/hosters/subscribers/${ofOne.subscription_id}/pause`, {
      cookie: one.cookie,
    });
    expect(paused.status).toBe(200);
    for (let i = 0; i < 10; i++) {
      const { status, json } = await servedBy({ model: SHARED });
      expect(status).toBe(200);
      expect(json.model).not.toBe(one.modelId);
    }
    const pinned = await servedBy({ model: SHARED, provider: { only: ["One Dollar"] } });
    expect(pinned.status).toBe(403);
    expect(pinned.json.error.code).toBe("subscription_paused");
  });
});
