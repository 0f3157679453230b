import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall, type CallOptions } from "./api-call.ts";

// Subscriptions through the public API, with two edges behind one set of services: what one edge
// does (cancel) must take effect on the other at once.
let system: RunningSystem;
let hoster: RegisteredHoster;
let planId: string;

type Json = Record<string, unknown>;

const call = (method: string, path: string, options: CallOptions & { url?: string } = {}) =>
  apiCall(options.url ?? system.url, method, path, options);

async function createPlan(body: Json): Promise<string> {
  const res = await call("POST", "/hosters/products", { cookie: hoster.cookie, body });
  expect(res.status).toBe(201);
  return res.body.product_id as string;
}

const balance = async (key: string) => (await call("GET", "/v1/usage", { key })).body.credit_balance_usd as number;
const subscribe = (key: string, productId: string, idempotencyKey?: string) =>
  call("POST", "/v1/subscriptions", { key, body: { product_id: productId }, idempotencyKey });

beforeAll(async () => {
  system = await startSystem({ edges: 2 });
  hoster = await registerHoster(system, { name: "Subscription Hoster" });
  planId = await createPlan({
    name: "Pro",
    pricing_model: "subscription",
    monthly_price_usd: 1.25,
    included_tokens: 1_000_000,
  });
});
afterAll(async () => {
  await hoster?.server.close();
  await system?.close();
});

describe("subscriptions through the edge", () => {
  it("subscribes, charging exactly the monthly price, and returns a scoped key shown once", async () => {
    const { apiKey } = await signUp(system.url);
    expect(await balance(apiKey)).toBe(5);

    const res = await subscribe(apiKey, planId, "first-try");
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      object: "subscription",
      product_id: planId,
      product_name: "Pro",
      hoster_id: hoster.hosterId,
      hoster_name: "Subscription Hoster",
      status: "active",
      pricing_model: "subscription",
      monthly_price_usd: 1.25,
      cancelled_at: null,
    });
    const scopedKey = res.body.api_key as string;
    expect(scopedKey).toMatch(/^mk_[A-Za-z0-9_-]{43}$/);
    expect(Date.parse(res.body.period_end as string)).toBeGreaterThan(Date.parse(res.body.created_at as string));
    expect(await balance(apiKey)).toBe(3.75);

    // Listed (never with the key) on every edge.
    for (const url of system.urls) {
      const list = await call("GET", "/v1/subscriptions", { key: apiKey, url });
      expect(list.status).toBe(200);
      const { api_key: _, ...listed } = res.body;
      expect(list.body.data).toEqual([listed]);
      expect(JSON.stringify(list.body)).not.toContain(scopedKey);
    }

    // The scoped key works like a key for models (the OpenAI SDK), confined to its hoster's.
    const client = new OpenAI({ apiKey: scopedKey, baseURL: `${system.url}/v1` });
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([hoster.modelId]);

    // It cannot manage keys or subscriptions.
    for (const [method, path] of [
      ["GET", "/v1/keys"],
      ["POST", "/v1/keys"],
      ["GET", "/v1/subscriptions"],
      ["POST", "/v1/subscriptions"],
      ["DELETE", `/v1/subscriptions/${res.body.subscription_id as string}`],
    ] as const) {
      const refused = await call(method, path, {
        key: scopedKey,
        body: method === "POST" ? { product_id: planId } : undefined,
      });
      expect(refused.status, `${method} ${path}`).toBe(403);
      expect(refused.body).toMatchObject({ error: { type: "permission_error", code: "forbidden" } });
    }

    // The owner sees it among their keys, and can end it only by cancelling the subscription.
    const keys = await call("GET", "/v1/keys", { key: apiKey });
    const scoped = (keys.body.data as Json[]).find((k) => k.subscription_id === res.body.subscription_id)!;
    expect(scoped).toMatchObject({ prefix: scopedKey.slice(0, 10), revoked_at: null });
    const revoke = await call("DELETE", `/v1/keys/${scoped.key_id as string}`, { key: apiKey });
    expect(revoke.status).toBe(400);
    expect(revoke.body).toMatchObject({ error: { code: "invalid_request", param: "key_id" } });
  });

  it("answers a retry with the same Idempotency-Key as the first call, key included, charging once", async () => {
    const { apiKey } = await signUp(system.url);
    const first = await subscribe(apiKey, planId, "retry-me");
    expect(first.status).toBe(201);
    const again = await subscribe(apiKey, planId, "retry-me");
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    expect(await balance(apiKey)).toBe(3.75);
  });

  it("refuses a second subscription to the same plan (409), and one the balance cannot pay (402)", async () => {
    const { apiKey } = await signUp(system.url);
    expect((await subscribe(apiKey, planId)).status).toBe(201);
    const second = await subscribe(apiKey, planId);
    expect(second.status).toBe(409);
    expect(second.body).toMatchObject({ error: { type: "invalid_request_error", code: "already_subscribed" } });

    const pricey = await createPlan({
      name: "Max",
      pricing_model: "subscription",
      monthly_price_usd: 9,
      included_tokens: 1,
    });
    const short = await subscribe(apiKey, pricey);
    expect(short.status).toBe(402);
    expect(short.body).toMatchObject({ error: { type: "insufficient_quota", code: "insufficient_credits" } });
    expect((short.body.error as Json).message).toMatch(/\$3\.75.*\$9\.00/);
    expect(await balance(apiKey)).toBe(3.75);
    expect(((await call("GET", "/v1/subscriptions", { key: apiKey })).body.data as Json[]).length).toBe(1);
  });

  it("refuses unknown and archived plans, and every field but product_id", async () => {
    const { apiKey } = await signUp(system.url);
    const unknown = await subscribe(apiKey, "00000000-0000-4000-8000-000000000000");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({ error: { code: "not_found", param: "product_id" } });

    const archived = await createPlan({ name: "Old", pricing_model: "free" });
    const archive = await call("POST", `/hosters/products/${archived}/archive`, { cookie: hoster.cookie });
    expect(archive.status).toBe(200);
    expect((await subscribe(apiKey, archived)).body).toMatchObject({
      error: { code: "invalid_request", param: "product_id" },
    });

    for (const [body, param] of [
      [{ product_id: planId, status: "active" }, "status"],
      [{ product_id: planId, account_id: "00000000-0000-4000-8000-000000000000" }, "account_id"],
      [{ product_id: planId, monthly_price_usd: 0 }, "monthly_price_usd"],
      [{}, "product_id"],
      [{ product_id: 42 }, "product_id"],
    ] as const) {
      const res = await call("POST", "/v1/subscriptions", { key: apiKey, body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_request", param } });
    }
    expect(await balance(apiKey)).toBe(5);
    expect((await call("GET", "/v1/subscriptions", { key: apiKey })).body.data).toEqual([]);
  });

  it("hides one customer's subscriptions from another, who cannot cancel them (404)", async () => {
    const a = await signUp(system.url);
    const b = await signUp(system.url);
    const created = await subscribe(a.apiKey, planId);
    const id = created.body.subscription_id as string;

    expect((await call("GET", "/v1/subscriptions", { key: b.apiKey })).body.data).toEqual([]);
    const cancel = await call("DELETE", `/v1/subscriptions/${id}`, { key: b.apiKey });
    expect(cancel.status).toBe(404);
    expect(cancel.body).toMatchObject({ error: { code: "not_found" } });
    expect((await call("GET", "/v1/subscriptions", { key: a.apiKey })).body.data).toMatchObject([{ status: "active" }]);
  });

  it("cancels: the scoped key is refused at once on every edge, and a repeat answers unchanged", async () => {
    const { apiKey } = await signUp(system.url);
    const created = await subscribe(apiKey, planId);
    const scopedKey = created.body.api_key as string;
    const id = created.body.subscription_id as string;
    // The key reaches its hoster (its lease grant checks the subscription), and both edges have its
    // principal cached.
    const chat = await call("POST", "/v1/chat/completions", {
      key: scopedKey,
      body: { model: "auto", max_tokens: 5, messages: [{ role: "user", content: "Hi" }] },
    });
    expect(chat.status, JSON.stringify(chat.body)).toBe(200);
    expect(chat.body.model).toBe(hoster.modelId);
    for (const url of system.urls) expect((await call("GET", "/v1/models", { key: scopedKey, url })).status).toBe(200);

    const cancelled = await call("DELETE", `/v1/subscriptions/${id}`, { key: apiKey, url: system.urls[1] });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ subscription_id: id, status: "cancelled" });
    expect(cancelled.body.cancelled_at).toEqual(expect.any(String));

    for (const url of system.urls) {
      const refused = await call("GET", "/v1/models", { key: scopedKey, url });
      expect(refused.status, url).toBe(401);
      expect(refused.body).toMatchObject({ error: { type: "authentication_error", code: "invalid_api_key" } });
    }

    const again = await call("DELETE", `/v1/subscriptions/${id}`, { key: apiKey });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(cancelled.body);
    // No refund; the plan is free to subscribe to again.
    expect(await balance(apiKey)).toBe(3.75);
    expect((await call("GET", "/v1/subscriptions", { key: apiKey })).body.data).toEqual([cancelled.body]);
    expect((await subscribe(apiKey, planId)).status).toBe(201);
  });
});
