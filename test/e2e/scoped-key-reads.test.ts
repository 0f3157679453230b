import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// Reports trail admission by one lease heartbeat (5 s in the e2e systems): the polls below wait for it.
vi.setConfig({ testTimeout: 90_000 });

/**
 * Least privilege for a subscription's key: it reads only what concerns its
 * subscription. Its usage, token series, breakdown and export cover that subscription's requests;
 * its rate limits are the plan's per-subscriber ones; the balance and tier stay the account's.
 */

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let system: RunningSystem;
let hoster: RegisteredHoster;
let ownKey: string;
let scopedKey: string;
/** The x-request-id of each chat: two on the account's own key, then one on the scoped key. */
const requestIds: string[] = [];

async function call(
  path: string,
  auth: { key?: string; cookie?: string },
  init: { method?: string; body?: unknown } = {},
) {
  const headers: Record<string, string> = {};
  if (auth.key) headers.authorization = `Bearer ${auth.key}`;
  if (auth.cookie) headers.cookie = auth.cookie;
  if (init.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${system.url}${path}`, {
    method: init.method ?? "GET",
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  return {
    status: res.status,
    text,
    requestId: res.headers.get("x-request-id")!,
    json: () => JSON.parse(text) as Json,
  };
}

const chat = (key: string, content: string) =>
  call(
    "/v1/chat/completions",
    { key },
    { method: "POST", body: { model: "auto", max_tokens: 8, messages: [{ role: "user", content }] } },
  );

beforeAll(async () => {
  system = await startSystem();
  hoster = await registerHoster(system, { name: "Least Privilege Hoster" });
  const plan = await call(
    "/hosters/products",
    { cookie: hoster.cookie },
    {
      method: "POST",
      body: {
        name: "Metered",
        pricing_model: "payg",
        input_price_per_1m_usd: 1,
        output_price_per_1m_usd: 2,
        rpm_limit: 7,
      },
    },
  );
  expect(plan.status).toBe(201);
  ({ apiKey: ownKey } = await signUp(system.url));
  const subscription = await call(
    "/v1/subscriptions",
    { key: ownKey },
    { method: "POST", body: { product_id: plan.json().product_id } },
  );
  expect(subscription.status).toBe(201);
  scopedKey = subscription.json().api_key as string;

  // The minute's counts are read below, up to 20 s after these requests: made early in a minute,
  // so that minute is still the current one then (a request counts in the minute it was admitted).
  const leftInMinute = 60_000 - (Date.now() % 60_000);
  if (leftInMinute < 30_000) await new Promise((resolve) => setTimeout(resolve, leftInMinute + 500));
  // Two requests on the account's own key (the local model), one on the subscription's key.
  for (const key of [ownKey, ownKey, scopedKey]) {
    const res = await chat(key, "Count me.");
    expect(res.status).toBe(200);
    requestIds.push(res.requestId);
  }
  await waitForUsage<Json>(system.url, ownKey, (usage) => usage.usage_30d.total_requests === 3);
});
afterAll(async () => {
  await system?.close();
  await hoster?.server.close();
});

describe("a scoped key reads only its subscription", () => {
  it("GET /v1/usage: the subscription's usage and plan limits, the account's balance and tier", async () => {
    const own = (await call("/v1/usage", { key: ownKey })).json();
    const scoped = (await call("/v1/usage", { key: scopedKey })).json();
    expect(own.usage_30d.total_requests).toBe(3);
    expect(scoped.usage_30d.total_requests).toBe(1);
    expect(scoped.usage_30d.total_cost_microdollars).toBeGreaterThan(0);
    expect(scoped.usage_30d.total_cost_microdollars).toBeLessThan(own.usage_30d.total_cost_microdollars);
    expect(scoped.credit_balance_usd).toBe(own.credit_balance_usd);
    expect(scoped.tier).toBe(own.tier);
    // Requests are admitted on the edge's lease, which reports them with its next heartbeat: the
    // minute's counts trail admission by at most that (docs/leases.md#how-much-room-an-edge-gets).
    await expect
      .poll(async () => (await call("/v1/usage", { key: scopedKey })).json().rate_limits, { timeout: 20_000 })
      .toMatchObject({ limit_per_minute: 7, requests_this_minute: 1, remaining_this_minute: 6 });
    await expect
      .poll(async () => (await call("/v1/usage", { key: ownKey })).json().rate_limits, { timeout: 20_000 })
      .toMatchObject({ limit_per_minute: 60, requests_this_minute: 3 });
  });

  it("the token series and the breakdown cover the subscription's requests only", async () => {
    const ownTokens = (await call("/v1/usage/tokens?days=30&interval=day", { key: ownKey })).json();
    const scopedTokens = (await call("/v1/usage/tokens?days=30&interval=day", { key: scopedKey })).json();
    expect(ownTokens.totals.requests).toBe(3);
    expect(scopedTokens.totals.requests).toBe(1);

    const ownBreakdown = (await call("/v1/usage/breakdown?days=30", { key: ownKey })).json();
    const scopedBreakdown = (await call("/v1/usage/breakdown?days=30", { key: scopedKey })).json();
    expect((ownBreakdown.by_model as Json[]).map((m) => m.model_id).sort()).toHaveLength(2);
    expect((scopedBreakdown.by_model as Json[]).map((m) => m.model_id)).toEqual([hoster.modelId]);
  });

  it("the CSV export holds the subscription's requests only", async () => {
    const ownRows = (await call("/v1/usage/export?days=30", { key: ownKey })).text.trim().split("\n");
    const scopedRows = (await call("/v1/usage/export?days=30", { key: scopedKey })).text.trim().split("\n");
    expect(ownRows).toHaveLength(1 + 3);
    expect(scopedRows).toHaveLength(1 + 1);
    expect(scopedRows[1]).toContain(hoster.modelId);
  });

  it("GET /v1/generations/{id} finds the subscription's requests only; the account's key finds them all", async () => {
    const [own, , scoped] = requestIds as [string, string, string];
    const seen = (await call(`/v1/generations/${scoped}`, { key: scopedKey })).json();
    expect(seen).toMatchObject({ provider: "hoster", hoster_id: hoster.hosterId, model: hoster.modelId });
    expect((await call(`/v1/generations/chatcmpl-${scoped}`, { key: ownKey })).json()).toEqual(seen);
    expect((await call(`/v1/generations/${own}`, { key: ownKey })).json()).toMatchObject({
      provider: "local",
      hoster_id: null,
    });
    const hidden = await call(`/v1/generations/${own}`, { key: scopedKey });
    expect(hidden.status).toBe(404);
    expect(hidden.json().error).toMatchObject({ type: "invalid_request_error", code: "not_found" });
  });
});
