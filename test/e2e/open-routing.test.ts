import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RECENT_FAULT_MS } from "../../edge/src/relay/outlier-tracker.ts";
import { startAdversarialUpstream } from "../../services/registry/test/fixtures/adversarial-upstream.ts";
import { waitFor } from "../../services/registry/test/registry-harness.ts";
import { apiCall } from "./api-call.ts";
import { failingHoster } from "./failing-hoster.ts";
import { postChat } from "./billing-db.ts";
import { registerHoster, registerOpenHoster, type RegisteredHoster } from "./hoster-fixture.ts";
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
/** What each answer of the shares test cost (micro-USD), by the model that served it. */
const costsByModel = new Map<string, bigint[]>();

async function openHoster(
  name: string,
  canonicalId: string,
  pricePer1m: number,
  options: { modelId?: string; quantization?: string; onAdversarial?: boolean } = {},
) {
  const hoster = await registerOpenHoster(system, {
    name,
    canonicalId,
    modelId: options.modelId,
    quantization: options.quantization,
    onServer: options.onAdversarial ? adversarial : undefined,
    plan: {
      input_price_per_1m_usd: pricePer1m / 2,
      output_price_per_1m_usd: pricePer1m / 2,
      rpm_limit: 5_000,
      tpm_limit: 1_000_000,
      max_concurrent: 50,
    },
  });
  hosters.push(hoster);
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
        const costs = costsByModel.get(json.model) ?? [];
        costs.push(BigInt(Math.round(json.usage.cost * 1_000_000)));
        costsByModel.set(json.model, costs);
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
    // Each hoster earns exactly 80% of each request it served (the platform's 20% rounded down,
    // request by request), from its implicit subscriber's usage.
    for (const hoster of [one, two, four]) {
      const costs = costsByModel.get(hoster.modelId) ?? [];
      const gross = costs.reduce((sum, c) => sum + c, 0n);
      const earned = costs.reduce((sum, c) => sum + c - (c * 20n) / 100n, 0n);
      const earnings = await waitFor(
        () => apiCall(system.url, "GET", "/v1/earnings/by-model", { cookie: hoster.cookie }),
        (res) => (res.body.by_model as Array<{ requests: number }> | undefined)?.[0]?.requests === costs.length,
      );
      expect(earnings.body.by_model, hoster.modelId).toEqual([
        expect.objectContaining({
          model_id: hoster.modelId,
          requests: costs.length,
          gross_usd: Number(gross) / 1_000_000,
          earned_usd: Number(earned) / 1_000_000,
        }),
      ]);
    }
  });

  it("holds credit at the dearest endpoint the balance affords, leaving dearer ones out", async () => {
    const AFFORD = "acme/afford-8b";
    for (const [name, output] of [
      ["Gold Plated", 1_000],
      ["Plain", 1],
    ] as const) {
      hosters.push(
        await registerOpenHoster(system, {
          name,
          canonicalId: AFFORD,
          plan: { input_price_per_1m_usd: 1, output_price_per_1m_usd: output, max_output_tokens: 8_000 },
        }),
      );
    }
    // A new account has 5 USD: 6,000 output tokens at 1,000 USD per 1M would be 6.
    const poor = (await signUp(system.url)).apiKey;
    const ask = (provider: unknown) => servedBy({ model: AFFORD, max_tokens: 6_000, provider }, poor);
    for (const name of ["Gold Plated", "Plain"]) {
      await waitFor(
        () => servedBy({ model: AFFORD, n: 2, provider: { only: [name] } }, poor),
        (res) => res.status === 400,
      );
    }
    const pinned = await ask({ only: ["Gold Plated"] });
    expect(pinned.status).toBe(402);
    const served = await ask({ order: ["Gold Plated", "Plain"] });
    expect(served.status, JSON.stringify(served.json)).toBe(200);
    expect(served.json.model).toBe(hosters.at(-1)!.modelId);
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

  it("lists each open model once in GET /v1/models, with its endpoints and lowest prices", async () => {
    const list = await apiCall(system.url, "GET", "/v1/models", { key: apiKey });
    const shared = (list.body.data as Array<Record<string, unknown>>).filter((m) => m.id === SHARED);
    const expected = {
      id: SHARED,
      object: "model",
      owned_by: "acme",
      provider: "open",
      kind: "chat",
      context_window: 8192,
      endpoints: 3,
      lowest_input_price_per_1m_usd: 0.5,
      lowest_output_price_per_1m_usd: 0.5,
    };
    expect(shared).toEqual([expect.objectContaining(expected)]);
    const one = await apiCall(system.url, "GET", `/v1/models/${SHARED}`, { key: apiKey });
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject(expected);
  });

  it("honours provider on /v1/responses and /v1/messages too", async () => {
    const responses = await apiCall(system.url, "POST", "/v1/responses", {
      key: apiKey,
      body: { model: SHARED, input: "hello", max_output_tokens: 16, provider: { only: ["Four Dollars"] } },
    });
    expect(responses.status).toBe(200);
    expect(responses.body.model).toBe(four.modelId);
    const messages = await apiCall(system.url, "POST", "/v1/messages", {
      key: apiKey,
      body: {
        model: SHARED,
        max_tokens: 16,
        messages: [{ role: "user", content: "hello" }],
        provider: { only: ["Two Dollars"] },
      },
    });
    expect(messages.status).toBe(200);
    expect(messages.body.model).toBe(two.modelId);
    for (const [path, body] of [
      ["/v1/responses", { model: SHARED, input: "hello", provider: { only: ["nobody"] } }],
      [
        "/v1/messages",
        { model: SHARED, max_tokens: 16, messages: [{ role: "user", content: "hi" }], provider: { sorted: 1 } },
      ],
    ] as const) {
      const res = await apiCall(system.url, "POST", path, { key: apiKey, body });
      expect(res.status, path).toBeGreaterThanOrEqual(400);
      expect(JSON.stringify(res.body), path).toMatch(/provider/);
    }
  });

  it("sorts by measured latency with sort: latency, though the slow endpoint is cheaper", async () => {
    const SPEED = "acme/speed-8b";
    const quick = await registerOpenHoster(system, {
      name: "Quick",
      canonicalId: SPEED,
      plan: { input_price_per_1m_usd: 2, rpm_limit: 5_000 },
    });
    hosters.push(quick);
    const slow = await registerOpenHoster(system, {
      name: "Slow",
      canonicalId: SPEED,
      serverEnv: { DEMO_TOKENS_PER_SECOND: "40" },
      plan: { input_price_per_1m_usd: 1, rpm_limit: 5_000 },
    });
    hosters.push(slow);
    for (const name of ["Quick", "Slow"]) {
      await waitFor(
        () => servedBy({ model: SPEED, n: 2, provider: { only: [name] } }),
        (res) => res.status === 400,
      );
      for (let i = 0; i < 3; i++) {
        expect((await servedBy({ model: SPEED, max_tokens: 16, provider: { only: [name] } })).status).toBe(200);
      }
    }
    // Registry has the latencies once their events are in; a verification round rebuilds the table.
    await waitFor(
      () => apiCall(system.url, "GET", `/v1/models/${SPEED}/endpoints`, { key: apiKey }),
      (res) =>
        (res.body.data as { endpoints: Array<{ stats: { last_30m: { requests: number } } }> }).endpoints.every(
          (e) => e.stats.last_30m.requests >= 3,
        ),
    );
    await system.verifyNow();
    const fastest = await waitFor(
      () => servedBy({ model: SPEED, provider: { sort: "latency" } }),
      (res) => res.json.model === quick.modelId,
    );
    expect(fastest.json.model).toBe(quick.modelId);
    for (let i = 0; i < 5; i++) {
      expect((await servedBy({ model: SPEED, provider: { sort: "latency" } })).json.model).toBe(quick.modelId);
      expect((await servedBy({ model: `${SPEED}:floor` })).json.model).toBe(slow.modelId);
    }
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
    // The hoster's subscriber list has the implicit subscriber, paused.
    const listed = await apiCall(system.url, "GET", "/v1/hoster/subscribers", { cookie: one.cookie });
    expect(listed.body.subscribers).toEqual([
      expect.objectContaining({ subscription_id: ofOne.subscription_id, status: "paused" }),
    ]);
  });

  it("takes a hoster the customer cancelled out of their routing for good", async () => {
    const subs = await apiCall(system.url, "GET", "/v1/subscriptions", { key: apiKey });
    const ofFour = (subs.body.data as Array<Record<string, string>>).find(
      (s) => s.origin === "open" && s.hoster_id === four.hosterId,
    )!;
    const cancelled = await apiCall(system.url, "DELETE", `/v1/subscriptions/${ofFour.subscription_id}`, {
      key: apiKey,
    });
    expect(cancelled.status).toBe(200);
    for (let i = 0; i < 10; i++) {
      const { status, json } = await servedBy({ model: SHARED, provider: { sort: "price", ignore: ["Two Dollars"] } });
      // One Dollar is paused (above), Four Dollars cancelled: nothing is left.
      expect(status, JSON.stringify(json)).toBe(403);
    }
    const pinned = await servedBy({ model: SHARED, provider: { only: ["Four Dollars"] } });
    expect(pinned.status).toBe(403);
    expect(pinned.json.error).toMatchObject({ code: "forbidden" });
    expect(pinned.json.error.message).toContain("cancelled");
    expect((await servedBy({ model: SHARED })).json.model).toBe(two.modelId);
  });
});

/**
 * A hoster whose server fails a share of its chat requests (a 500 before any byte) while `failing`
 * is on: 3 requests of every 10.
 */
const flakyServer = () => failingHoster("flaky-8b", (state) => state.failing && state.chats % 10 < 3, true);

describe("open models on two edges: plan limits, and an endpoint below 80% uptime", () => {
  let flakySystem: RunningSystem;
  let clockOffsetMs = 0;
  let key: string;
  let flaky: Awaited<ReturnType<typeof flakyServer>>;
  const FLAKY = "acme/flaky-8b";
  const local: RegisteredHoster[] = [];

  beforeAll(async () => {
    // Verification runs only when the test says (verifyNow), so the proxy counts only its traffic.
    flakySystem = await startSystem({
      edges: 2,
      billing: { TIERS: JSON.stringify({ free: { limit_per_minute: 5_000, limit_per_day: 50_000 } }) },
      registry: { VERIFY_INTERVAL_MS: "86400000" },
      registryClock: () => new Date(Date.now() + clockOffsetMs),
    });
    key = (await signUp(flakySystem.url)).apiKey;
    flaky = await flakyServer();
    for (const [name, price, startServer] of [
      ["Flaky", 1, async () => flaky],
      ["Steady", 2, undefined],
    ] as const) {
      const hoster = await registerHoster(flakySystem, {
        name,
        modelId: name === "Flaky" ? "flaky-8b" : undefined,
        model: { canonical_id: FLAKY },
        startServer,
      });
      local.push(hoster);
      const plan = await apiCall(flakySystem.url, "POST", "/hosters/products", {
        cookie: hoster.cookie,
        body: {
          name,
          pricing_model: "payg",
          input_price_per_1m_usd: price,
          output_price_per_1m_usd: 0,
          rpm_limit: 5_000,
          open: true,
        },
      });
      expect(plan.status).toBe(201);
    }
  });
  afterAll(async () => {
    for (const hoster of local) await hoster.server.close();
    await flakySystem?.close();
  });

  const ask = async (provider?: unknown) => {
    const res = await postChat(flakySystem.url, key, {
      model: FLAKY,
      messages: [{ role: "user", content: "hello" }],
      max_tokens: 4,
      ...(provider !== undefined && { provider }),
    });
    return { status: res.status, model: ((await res.json()) as { model?: string }).model };
  };
  const servedBy = async (n: number) => {
    const models: Array<string | undefined> = [];
    for (let i = 0; i < n; i++) models.push((await ask()).model);
    return models;
  };

  it("holds an open plan's limits per account across two edges (its implicit subscription's budget)", async () => {
    const LIMITED = "acme/limited-8b";
    const hoster = await registerOpenHoster(flakySystem, {
      name: "Limited",
      canonicalId: LIMITED,
      plan: { name: "Three a minute", pricing_model: "free", rpm_limit: 3 },
    });
    local.push(hoster);
    const call = (url: string) =>
      postChat(url, key, { model: LIMITED, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
    for (const url of flakySystem.urls) {
      await waitFor(
        () => postChat(url, key, { model: LIMITED, n: 2, messages: [{ role: "user", content: "hi" }] }),
        (res) => res.status === 400,
      );
    }
    // Wait for a fresh minute, so that the plan's three fit in it whatever the clock says.
    const second = new Date().getSeconds();
    if (second > 45) await new Promise((resolve) => setTimeout(resolve, (61 - second) * 1000));
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await call(flakySystem.urls[i % 2]!);
      await res.text();
      statuses.push(res.status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(5);
  });

  it(
    "becomes fallback only, then comes back once its probes and traffic succeed past the window",
    { timeout: 90_000 },
    async () => {
      const [flakyHoster, steady] = local as [RegisteredHoster, RegisteredHoster];
      await waitFor(
        () => ask({ only: ["Steady"] }),
        (res) => res.status === 200,
      );
      // 40 requests pinned to it: 12 fail, uptime 70% over 40 judged.
      const pinned = [];
      for (let i = 0; i < 40; i++) pinned.push((await ask({ only: ["Flaky"] })).status);
      expect(pinned.filter((s) => s !== 200)).toHaveLength(12);
      const listed = async () =>
        (
          (await (
            await fetch(`${flakySystem.url}/v1/models/${FLAKY}/endpoints`, {
              headers: { authorization: `Bearer ${key}` },
            })
          ).json()) as { data: { endpoints: Array<{ hoster_id: string; stats: { last_30m: { uptime: number } } }> } }
        ).data.endpoints.find((e) => e.hoster_id === flakyHoster.hosterId)!;
      await waitFor(listed, (e) => e.stats.last_30m.uptime < 0.8);
      await flakySystem.verifyNow();
      // Fallback only: every request goes to the steady hoster first, though it costs twice as much.
      const whileFlaky = await waitFor(
        () => servedBy(20),
        (models) => models.every((m) => m === steady.modelId),
      );
      expect(whileFlaky).toHaveLength(20);

      // It recovers: no more failures, and registry's clock moves past the 30-minute window. The
      // edge itself tries it after the others until RECENT_FAULT_MS (its own clock) after its last
      // fault, so the test waits that long once.
      flaky.state.failing = false;
      clockOffsetMs = 31 * 60_000;
      await flakySystem.verifyNow();
      await new Promise((resolve) => setTimeout(resolve, RECENT_FAULT_MS));
      const recovered = await waitFor(
        () => servedBy(20),
        (models) => models.filter((m) => m === flakyHoster.modelId).length > 5,
      );
      expect(recovered.filter((m) => m === flakyHoster.modelId).length).toBeGreaterThan(5);
    },
  );
});
