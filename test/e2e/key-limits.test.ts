import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postChat } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Per-key spend limits through the public API (docs/adr/0020-key-spend-limits-in-billing.md), on
// two edges.
const TTL = 1_000;
let system: RunningSystem;
beforeAll(async () => {
  // The tier's request limits are ample (some 500 requests share one 0.01 USD limit below): only
  // a key's limit refuses here.
  const TIERS = JSON.stringify({ free: { limit_per_minute: 100_000, limit_per_day: 1_000_000 } });
  system = await startSystem({
    edges: 2,
    billing: { LEASE_TTL_MS: String(TTL), TIERS },
  });
});
afterAll(async () => {
  await system?.close();
});

const auth = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });
// The demo model answers 24 tokens: a cap of 10 cuts every answer at the cap, so each request
// settles at exactly its admitted worst case and a spent limit stays spent once settlement
// releases the holds (an answer cheaper than its hold would give room back, and the key would
// rightly be served again).
const chat = (url: string, key: string) =>
  postChat(url, key, { model: "demo-small", max_tokens: 10, messages: [{ role: "user", content: "hi" }] });

interface KeyView {
  key_id: string;
  limit_usd: number | null;
  limit_reset: string | null;
  spend_usd: number;
  limit_remaining_usd: number | null;
  limit_resets_at: string | null;
}

async function listed(owner: string, keyId: string): Promise<KeyView> {
  const res = await fetch(`${system.url}/v1/keys`, { headers: auth(owner) });
  expect(res.status).toBe(200);
  const { data } = (await res.json()) as { data: KeyView[] };
  return data.find((k) => k.key_id === keyId)!;
}

describe("key spend limits", () => {
  it("a limited key is refused 402 key_limit_exceeded on both edges once spent; PATCH lifts it", async () => {
    const { apiKey: owner } = await signUp(system.url);
    const created = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: auth(owner),
      body: JSON.stringify({ name: "capped", limit_usd: 0.0001, limit_reset: "daily" }),
    });
    expect(created.status).toBe(201);
    const key = (await created.json()) as KeyView & { api_key: string };
    expect(key).toMatchObject({ limit_usd: 0.0001, limit_reset: "daily", spend_usd: 0, limit_remaining_usd: 0.0001 });
    expect(key.limit_resets_at).toMatch(/^\d{4}-\d{2}-\d{2}T00:00:00\+00:00$/);

    // Each request's worst case (and cost) is ~0.00002 USD: a few fit, then every edge refuses the key.
    let served = 0;
    type Refusal = { error: { code: string; type: string; message: string } };
    let refusal: { status: number; body: Refusal } | undefined;
    for (let i = 0; i < 20 && !refusal; i++) {
      const res = await chat(system.urls[i % 2]!, key.api_key);
      const body = (await res.json()) as Refusal;
      if (res.status === 200) served += 1;
      else refusal = { status: res.status, body };
    }
    expect(served).toBeGreaterThan(0);
    expect(refusal?.status).toBe(402);
    expect(refusal?.body.error).toMatchObject({ type: "insufficient_quota", code: "key_limit_exceeded" });
    expect(refusal?.body.error.message).toMatch(/\$0\.0001 per day .*resets at \d{4}-\d{2}-\d{2}T00:00:00\+00:00/);
    for (const url of system.urls) expect((await chat(url, key.api_key)).status).toBe(402);
    // The account's other key is not limited by it.
    expect((await chat(system.url, owner)).status).toBe(200);

    await expect.poll(async () => (await listed(owner, key.key_id)).spend_usd, { timeout: 10_000 }).toBeGreaterThan(0);
    const view = await listed(owner, key.key_id);
    expect(view.spend_usd).toBeLessThanOrEqual(0.0001);
    expect(view.limit_remaining_usd).toBeCloseTo(0.0001 - view.spend_usd, 6);

    const patched = await fetch(`${system.url}/v1/keys/${key.key_id}`, {
      method: "PATCH",
      headers: auth(owner),
      body: JSON.stringify({ limit_usd: null }),
    });
    expect(patched.status).toBe(200);
    expect(await patched.json()).toMatchObject({ key_id: key.key_id, limit_usd: null, limit_remaining_usd: null });
    for (const url of system.urls) expect((await chat(url, key.api_key)).status).toBe(200);
  }, 60_000);

  it("of 0.01 USD under 64 concurrent clients over both edges is never passed, and its spend is what the answers cost", async () => {
    const { apiKey: owner } = await signUp(system.url);
    const created = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: auth(owner),
      body: JSON.stringify({ name: "shared", limit_usd: 0.01, limit_reset: "monthly" }),
    });
    expect(created.status).toBe(201);
    const key = (await created.json()) as KeyView & { api_key: string };

    // 64 clients, half on each edge, each sending until its key is refused.
    const costs: number[] = [];
    const refusals: Array<{ status: number; code: string }> = [];
    await Promise.all(
      Array.from({ length: 64 }, async (_, client) => {
        for (;;) {
          const res = await chat(system.urls[client % 2]!, key.api_key);
          const body = (await res.json()) as { usage?: { cost: number }; error?: { code: string } };
          if (res.status !== 200) return refusals.push({ status: res.status, code: body.error!.code });
          costs.push(body.usage!.cost);
        }
      }),
    );
    expect(refusals).toHaveLength(64);
    for (const refusal of refusals) expect(refusal).toEqual({ status: 402, code: "key_limit_exceeded" });
    const micros = (usd: number) => Math.round(usd * 1e6);
    const charged = costs.reduce((sum, cost) => sum + micros(cost), 0);
    expect(charged).toBeLessThanOrEqual(10_000);
    // Room an edge held unused was recalled for the other: the limit was spent until less than
    // one request's cost was left.
    expect(10_000 - charged).toBeLessThan(micros(Math.max(...costs)));
    // Once settled, the key's window spend is exactly what the answers said they cost.
    await expect
      .poll(async () => micros((await listed(owner, key.key_id)).spend_usd), { timeout: 15_000 })
      .toBe(charged);
  }, 120_000);

  it("refuses a bad limit with a 400 naming the field, and an unknown key with 404", async () => {
    const { apiKey: owner } = await signUp(system.url);
    const bad = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: auth(owner),
      body: JSON.stringify({ limit_usd: 1, limit_reset: "hourly" }),
    });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_request" } });
    const negative = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: auth(owner),
      body: JSON.stringify({ limit_usd: -1 }),
    });
    expect(negative.status).toBe(400);
    const unknown = await fetch(`${system.url}/v1/keys/00000000-0000-4000-8000-000000000000`, {
      method: "PATCH",
      headers: auth(owner),
      body: JSON.stringify({ limit_usd: 1 }),
    });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ error: { code: "not_found" } });
  });

  it("is in the OpenAPI document, with an example, on POST and PATCH /v1/keys", async () => {
    type Body = { content: Record<string, { schema: { properties: object } }> };
    const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as {
      paths: Record<string, Record<string, { requestBody: Body }>>;
    };
    for (const [path, method] of [
      ["/v1/keys", "post"],
      ["/v1/keys/{key_id}", "patch"],
    ] as const) {
      const body = doc.paths[path]![method]!.requestBody.content["application/json"]!.schema;
      expect(body.properties, `${method} ${path}`).toMatchObject({
        limit_usd: { minimum: 0, example: 5 },
        limit_reset: { enum: ["daily", "weekly", "monthly", null], example: "monthly" },
      });
    }
  });
});
