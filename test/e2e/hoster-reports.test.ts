import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall, type CallOptions } from "./api-call.ts";

// A hoster's side of the marketplace through the public API: plans, subscribers, pausing one of
// them, and the earnings reports, checked to the micro-dollar against billing's ledger.
let system: RunningSystem;
let db: BillingDb;
let hoster: RegisteredHoster;
let rival: RegisteredHoster;
let monthlyPlan: string;
let paygPlan: string;
let monthly: { apiKey: string; email: string; scopedKey: string; subscriptionId: string };
let payg: { apiKey: string; email: string; scopedKey: string; subscriptionId: string };

type Json = Record<string, unknown>;

const call = (method: string, path: string, options: CallOptions = {}) => apiCall(system.url, method, path, options);

async function createPlan(body: Json): Promise<string> {
  const res = await call("POST", "/hosters/products", { cookie: hoster.cookie, body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.product_id as string;
}

async function subscriber(productId: string) {
  const { apiKey, email } = await signUp(system.url);
  const res = await call("POST", "/v1/subscriptions", { key: apiKey, body: { product_id: productId } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { apiKey, email, scopedKey: res.body.api_key as string, subscriptionId: res.body.subscription_id as string };
}

const chat = (key: string) =>
  call("POST", "/v1/chat/completions", {
    key,
    body: { model: "auto", max_tokens: 5, messages: [{ role: "user", content: "Hello there" }] },
  });

/**
 * What billing's ledger says the hoster was paid (micro-USD), by journal kind or in all: usage is
 * the hoster's legs of settled batches' entries (and of per-request entries before them).
 */
const posted = (hosterId: string, kind?: "usage" | "subscription_fee") =>
  db.figure(
    `select sum(p.amount_micros)::text as v from ledger_postings p join journal_entries e on e.id = p.entry_id
     where p.ledger_account = $1 and ($2::text[] is null or e.kind = any($2))`,
    [`hoster:${hosterId}`, kind === "usage" ? ["usage", "usage_batch"] : kind ? [kind] : null],
  );

const micros = (usd: unknown) => BigInt(Math.round((usd as number) * 1_000_000));

let servedRequests = 0;

beforeAll(async () => {
  system = await startSystem();
  db = await openBillingDb(system.databaseUrl);
  hoster = await registerHoster(system, { name: "Reports Hoster" });
  rival = await registerHoster(system, { name: "Rival Hoster" });
  // 1.234567 USD: the platform's floor(20%) is 0.246913, the hoster's posted share 0.987654.
  monthlyPlan = await createPlan({
    name: "Monthly",
    pricing_model: "subscription",
    monthly_price_usd: 1.234567,
    included_tokens: 1_000_000,
  });
  paygPlan = await createPlan({
    name: "Metered",
    pricing_model: "payg",
    input_price_per_1m_usd: 7,
    output_price_per_1m_usd: 11,
  });
  monthly = await subscriber(monthlyPlan);
  payg = await subscriber(paygPlan);
  for (const key of [monthly.scopedKey, payg.scopedKey, payg.scopedKey]) {
    const res = await chat(key);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    servedRequests++;
  }
});
afterAll(async () => {
  await db?.close();
  await hoster?.server.close();
  await rival?.server.close();
  await system?.close();
});

/** Settlement is asynchronous: wait until every served request has its usage record. */
async function settled() {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const records = await db.figure(`select count(*)::text as v from usage_records where hoster_id = $1`, [
      hoster.hosterId,
    ]);
    // Reports read the rollups, which trail the records by one fold: the test folds them now.
    if (records >= BigInt(servedRequests)) {
      await system.foldRollups();
      return;
    }
    if (Date.now() > deadline) throw new Error(`only ${records} of ${servedRequests} requests settled`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("a hoster pauses and resumes a subscriber", () => {
  it("the paused subscriber's next request is 403 with the exact message; after resume it is served", async () => {
    const paused = await call("POST", `/hosters/subscribers/${monthly.subscriptionId}/pause`, {
      cookie: hoster.cookie,
    });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body).toMatchObject({
      subscription_id: monthly.subscriptionId,
      product_id: monthlyPlan,
      status: "paused",
      email_masked: `u***@example.com`,
    });

    const refused = await chat(monthly.scopedKey);
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({
      error: {
        message: "Your access has been temporarily paused by the hoster.",
        type: "permission_error",
        param: null,
        code: "subscription_paused",
      },
    });
    // The OpenAI SDK sees the same message.
    const client = new OpenAI({ apiKey: monthly.scopedKey, baseURL: `${system.url}/v1`, maxRetries: 0 });
    await expect(
      client.chat.completions.create({ model: "auto", max_tokens: 5, messages: [{ role: "user", content: "Hi" }] }),
    ).rejects.toMatchObject({ status: 403, message: expect.stringContaining("temporarily paused by the hoster") });
    // The customer sees it paused; pausing again changes nothing.
    const listed = await call("GET", "/v1/subscriptions", { key: monthly.apiKey });
    expect((listed.body.data as Json[])[0]).toMatchObject({ status: "paused" });
    const again = await call("POST", `/hosters/subscribers/${monthly.subscriptionId}/pause`, { cookie: hoster.cookie });
    expect(again.body).toMatchObject({ status: "paused" });

    const resumed = await call("POST", `/hosters/subscribers/${monthly.subscriptionId}/resume`, {
      cookie: hoster.cookie,
    });
    expect(resumed.status).toBe(200);
    expect(resumed.body).toMatchObject({ status: "active" });
    const served = await chat(monthly.scopedKey);
    expect(served.status, JSON.stringify(served.body)).toBe(200);
    servedRequests++;
  });

  it("another hoster cannot pause or resume it (404), and unknown ids are 404 alike", async () => {
    for (const action of ["pause", "resume"]) {
      const res = await call("POST", `/hosters/subscribers/${monthly.subscriptionId}/${action}`, {
        cookie: rival.cookie,
      });
      expect(res.status).toBe(404);
      expect(res.body).toMatchObject({ error: { type: "invalid_request_error", code: "not_found" } });
    }
    const unknown = await call("POST", `/hosters/subscribers/00000000-0000-4000-8000-000000000000/pause`, {
      cookie: hoster.cookie,
    });
    expect(unknown.status).toBe(404);
    expect((await chat(monthly.scopedKey)).status).toBe(200);
    servedRequests++;
  });
});

describe("hoster reports", () => {
  it("earnings are the posted shares: the monthly fee's 80% to the micro-dollar, and the per-request shares", async () => {
    await settled();
    const res = await call("GET", "/v1/earnings?days=30", { cookie: hoster.cookie });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const usage = await posted(hoster.hosterId, "usage");
    const all = await posted(hoster.hosterId);
    expect(await posted(hoster.hosterId, "subscription_fee")).toBe(987_654n);
    expect(usage).toBeGreaterThan(0n); // the payg plan's requests were charged, 80% to the hoster

    expect(res.body).toMatchObject({
      period_days: 30,
      payout_threshold_usd: 10,
      payout_eligible: false,
    });
    expect(micros(res.body.total_earned_usd)).toBe(all);
    expect(micros(res.body.payable_usd)).toBe(all);
    expect(res.body.by_plan).toEqual([
      {
        product_id: monthlyPlan,
        product_name: "Monthly",
        pricing_model: "subscription",
        subscribers: 1,
        subscription_fees_usd: 0.987654,
        usage_earned_usd: 0,
        earned_usd: 0.987654,
      },
      {
        product_id: paygPlan,
        product_name: "Metered",
        pricing_model: "payg",
        subscribers: 1,
        subscription_fees_usd: 0,
        usage_earned_usd: Number(usage) / 1_000_000,
        earned_usd: Number(usage) / 1_000_000,
      },
    ]);
    const daily = res.body.daily as Array<{ date: string; earned_usd: number }>;
    expect(daily).toHaveLength(31);
    expect(daily.at(-1)!.date).toBe(new Date().toISOString().slice(0, 10));
    expect(daily.reduce((sum, d) => sum + micros(d.earned_usd), 0n)).toBe(all);

    // The default window is 30 days.
    expect((await call("GET", "/v1/earnings", { cookie: hoster.cookie })).body).toEqual(res.body);
  });

  it("by model: the hoster's requests, tokens, what customers paid and the hoster's shares", async () => {
    await settled();
    const res = await call("GET", "/v1/earnings/by-model?days=7", { cookie: hoster.cookie });
    expect(res.status).toBe(200);
    const [figures] = await db.query<{ requests: string; input: string; output: string; cost: string }>(
      `select count(*)::text as requests, sum(input_tokens)::text as input, sum(output_tokens)::text as output,
         sum(cost_micros)::text as cost
       from usage_records where hoster_id = $1`,
      [hoster.hosterId],
    );
    expect(res.body).toEqual({
      period_days: 7,
      by_model: [
        {
          model_id: hoster.modelId,
          requests: servedRequests,
          input_tokens: Number(figures!.input),
          output_tokens: Number(figures!.output),
          gross_usd: Number(figures!.cost) / 1_000_000,
          earned_usd: Number(await posted(hoster.hosterId, "usage")) / 1_000_000,
        },
      ],
    });
  });

  it("lists plans and subscribers with usage and masked e-mails, never the address", async () => {
    await settled();
    const res = await call("GET", "/v1/hoster/subscribers", { cookie: hoster.cookie });
    expect(res.status).toBe(200);
    const usage = Number(await posted(hoster.hosterId, "usage")) / 1_000_000;
    expect(res.body.plans).toEqual([
      { product_id: monthlyPlan, product_name: "Monthly", subscribers: 1, earned_usd: 0.987654 },
      { product_id: paygPlan, product_name: "Metered", subscribers: 1, earned_usd: usage },
    ]);
    const subscribers = res.body.subscribers as Json[];
    expect(subscribers.map((s) => s.subscription_id)).toEqual([payg.subscriptionId, monthly.subscriptionId]);
    expect(subscribers[1]).toMatchObject({
      product_id: monthlyPlan,
      product_name: "Monthly",
      status: "active",
      email_masked: "u***@example.com",
      requests: 3,
    });
    expect(subscribers[0]).toMatchObject({ status: "active", requests: 2 });
    expect(subscribers[0]!.total_tokens).toBeGreaterThan(0);
    expect(Date.parse(subscribers[0]!.period_end as string)).toBeGreaterThan(Date.now());
    const text = JSON.stringify(res.body);
    expect(text).not.toContain(monthly.email);
    expect(text).not.toContain(payg.email);
  });

  it("shows another hoster nothing of this hoster's", async () => {
    const earnings = await call("GET", "/v1/earnings?days=365", { cookie: rival.cookie });
    expect(earnings.body).toMatchObject({ total_earned_usd: 0, payable_usd: 0, by_plan: [] });
    const byModel = await call("GET", "/v1/earnings/by-model", { cookie: rival.cookie });
    expect(byModel.body).toEqual({ period_days: 30, by_model: [] });
    const subscribers = await call("GET", "/v1/hoster/subscribers", { cookie: rival.cookie });
    expect(subscribers.body).toEqual({ plans: [], subscribers: [] });
  });

  it("validates days: 1..365, an integer (400 naming days)", async () => {
    for (const path of ["/v1/earnings", "/v1/earnings/by-model"]) {
      for (const days of ["0", "366", "abc", "1.5"]) {
        const res = await call("GET", `${path}?days=${days}`, { cookie: hoster.cookie });
        expect(res.status, `${path}?days=${days}`).toBe(400);
        expect(res.body).toMatchObject({ error: { type: "invalid_request_error", param: "days" } });
      }
      expect((await call("GET", `${path}?days=365`, { cookie: hoster.cookie })).status).toBe(200);
    }
  });

  it("needs a hoster session: API keys are 401, a customer's session 403", async () => {
    const login = await fetch(`${system.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: monthly.email, password: "correct horse battery staple" }),
    });
    expect(login.status).toBe(200);
    const customerCookie = (login.headers.getSetCookie()[0] ?? "").split(";")[0]!;
    const routes: Array<[string, string]> = [
      ["GET", "/v1/earnings"],
      ["GET", "/v1/earnings/by-model"],
      ["GET", "/v1/hoster/subscribers"],
      ["POST", `/hosters/subscribers/${monthly.subscriptionId}/pause`],
      ["POST", `/hosters/subscribers/${monthly.subscriptionId}/resume`],
    ];
    for (const [method, path] of routes) {
      for (const key of [monthly.apiKey, monthly.scopedKey]) {
        const res = await call(method, path, { key });
        expect(res.status, `${method} ${path} with a key`).toBe(401);
        expect(res.body).toMatchObject({ error: { type: "authentication_error", code: "unauthenticated" } });
      }
      const res = await call(method, path, { cookie: customerCookie });
      expect(res.status, `${method} ${path} with a customer session`).toBe(403);
      expect(res.body).toMatchObject({ error: { type: "permission_error", code: "forbidden" } });
    }
    // The hoster's own cookie, sent by a page of another site, is refused too (CSRF guard).
    const forged = await fetch(`${system.url}/hosters/subscribers/${monthly.subscriptionId}/pause`, {
      method: "POST",
      headers: { cookie: hoster.cookie, origin: "https://evil.example" },
    });
    expect(forged.status).toBe(403);
    // None of it paused anything.
    expect((await chat(monthly.scopedKey)).status).toBe(200);
    servedRequests++;
  });

  it("documents the routes in the OpenAPI description", async () => {
    const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as { paths: Record<string, object> };
    for (const path of ["/v1/earnings", "/v1/earnings/by-model", "/v1/hoster/subscribers"]) {
      expect(Object.keys(doc.paths[path]!), path).toEqual(["get"]);
    }
    for (const action of ["pause", "resume"]) {
      expect(Object.keys(doc.paths[`/hosters/subscribers/{subscription_id}/${action}`]!)).toEqual(["post"]);
    }
  });
});
