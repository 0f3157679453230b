import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall, type CallOptions } from "./api-call.ts";

let system: RunningSystem;
let hosterA: RegisteredHoster;
let hosterB: RegisteredHoster;
let customer: { apiKey: string; cookie: string };

beforeAll(async () => {
  system = await startSystem();
  hosterA = await registerHoster(system, { name: "Plan Hoster A" });
  hosterB = await registerHoster(system, { name: "Plan Hoster B" });
  const { apiKey, email } = await signUp(system.url);
  const login = await fetch(`${system.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "correct horse battery staple" }),
  });
  expect(login.status).toBe(200);
  customer = { apiKey, cookie: login.headers.getSetCookie()[0]!.split(";")[0]! };
});
afterAll(async () => {
  await hosterA?.server.close();
  await hosterB?.server.close();
  await system?.close();
});

type Json = Record<string, unknown>;

const call = (method: string, path: string, options: CallOptions = {}) => apiCall(system.url, method, path, options);

const createPlan = (body: unknown, cookie = hosterA.cookie) => call("POST", "/hosters/products", { cookie, body });
const listPlans = async (cookie = hosterA.cookie) =>
  (await call("GET", "/hosters/products", { cookie })).body.data as Json[];
const publicPlans = async (hosterId: string) => {
  const res = await fetch(`${system.url}/v1/hosters`, { headers: { authorization: `Bearer ${customer.apiKey}` } });
  expect(res.status).toBe(200);
  const { data } = (await res.json()) as { data: Array<{ hoster_id: string; plans: Json[] }> };
  return data.find((h) => h.hoster_id === hosterId)!.plans;
};

const DEFAULT_LIMITS = {
  rpm_limit: 60,
  tpm_limit: 100_000,
  max_concurrent: 5,
  max_output_tokens: 4096,
  max_context_tokens: 8192,
};
const NO_PRICES = {
  monthly_price_usd: 0,
  included_tokens: 0,
  input_price_per_1m_usd: 0,
  output_price_per_1m_usd: 0,
  overage_price_per_1m_usd: 0,
  cached_input_price_per_1m_usd: null,
};

describe("hoster plans through the edge", () => {
  it("creates one plan of each pricing model, lists, publishes, edits and archives them", async () => {
    const requests = [
      { name: "Free", pricing_model: "free", description: "Try it out" },
      { name: "PAYG", pricing_model: "payg", input_price_per_1m_usd: 0.2, output_price_per_1m_usd: 0.6 },
      { name: "Monthly", pricing_model: "subscription", monthly_price_usd: 9.99, included_tokens: 5_000_000 },
      {
        name: "Monthly plus",
        pricing_model: "subscription_overage",
        monthly_price_usd: 19,
        included_tokens: 10_000_000,
        overage_price_per_1m_usd: 1.25,
        rpm_limit: 120,
        max_context_tokens: 32_768,
      },
    ];
    const created: Json[] = [];
    for (const request of requests) {
      const res = await createPlan(request);
      expect(res.status).toBe(201);
      created.push(res.body);
    }
    expect(created[0]).toEqual({
      product_id: expect.any(String),
      description: "Try it out",
      name: "Free",
      pricing_model: "free",
      ...NO_PRICES,
      ...DEFAULT_LIMITS,
      open: false,
      status: "active",
      created_at: expect.any(String),
      updated_at: created[0]!.created_at,
    });
    expect(created[1]).toMatchObject({
      ...NO_PRICES,
      ...DEFAULT_LIMITS,
      description: "",
      input_price_per_1m_usd: 0.2,
      output_price_per_1m_usd: 0.6,
    });
    expect(created[2]).toMatchObject({ ...NO_PRICES, monthly_price_usd: 9.99, included_tokens: 5_000_000 });
    expect(created[3]).toMatchObject({
      ...DEFAULT_LIMITS,
      monthly_price_usd: 19,
      included_tokens: 10_000_000,
      overage_price_per_1m_usd: 1.25,
      input_price_per_1m_usd: 0,
      rpm_limit: 120,
      max_context_tokens: 32_768,
    });

    expect(await listPlans()).toEqual(created);
    expect(await publicPlans(hosterA.hosterId)).toEqual(created);

    const [, payg, monthly] = created as [Json, Json, Json, Json];
    const edited = await call("PATCH", `/hosters/products/${String(payg.product_id)}`, {
      cookie: hosterA.cookie,
      body: { output_price_per_1m_usd: 0.75, description: "Cheaper input", max_output_tokens: 2048 },
    });
    expect(edited.status).toBe(200);
    expect(edited.body).toMatchObject({
      ...payg,
      output_price_per_1m_usd: 0.75,
      description: "Cheaper input",
      max_output_tokens: 2048,
      updated_at: expect.any(String),
    });

    const archived = await call("POST", `/hosters/products/${String(monthly.product_id)}/archive`, {
      cookie: hosterA.cookie,
    });
    expect(archived.status).toBe(200);
    expect(archived.body).toMatchObject({ product_id: monthly.product_id, name: "Monthly", status: "archived" });
    const again = await call("POST", `/hosters/products/${String(monthly.product_id)}/archive`, {
      cookie: hosterA.cookie,
    });
    expect([again.status, again.body]).toEqual([archived.status, archived.body]);

    const published = await publicPlans(hosterA.hosterId);
    expect(published.map((p) => p.product_id)).toEqual([created[0], created[1], created[3]].map((p) => p!.product_id));
    expect(published[1]).toEqual(edited.body);
    expect((await listPlans()).find((p) => p.product_id === monthly.product_id)).toEqual(archived.body);

    // An archived plan is frozen.
    const frozen = await call("PATCH", `/hosters/products/${String(monthly.product_id)}`, {
      cookie: hosterA.cookie,
      body: { name: "Monthly again" },
    });
    expect(frozen.status).toBe(400);
    expect(frozen.body).toMatchObject({ error: { code: "invalid_request", param: "product_id" } });
  });

  it("opens a payg plan to every account key: open in the hoster's list and the public one, closed by a PATCH", async () => {
    const res = await createPlan({
      name: "Open PAYG",
      pricing_model: "payg",
      input_price_per_1m_usd: 0.1,
      output_price_per_1m_usd: 0.3,
      open: true,
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ name: "Open PAYG", open: true });
    const id = res.body.product_id as string;
    expect((await listPlans()).find((p) => p.product_id === id)).toMatchObject({ open: true });
    expect((await publicPlans(hosterA.hosterId)).find((p) => p.product_id === id)).toMatchObject({ open: true });

    const closed = await call("PATCH", `/hosters/products/${id}`, { cookie: hosterA.cookie, body: { open: false } });
    expect(closed.status).toBe(200);
    expect(closed.body).toMatchObject({ open: false, input_price_per_1m_usd: 0.1 });
  });

  it("prices cached input on payg and overage plans: shown as stored, null when absent, never above the price it discounts", async () => {
    const payg = await createPlan({
      name: "Cached PAYG",
      pricing_model: "payg",
      input_price_per_1m_usd: 0.2,
      output_price_per_1m_usd: 0.6,
      cached_input_price_per_1m_usd: 0.02,
    });
    expect(payg.status).toBe(201);
    expect(payg.body).toMatchObject({ input_price_per_1m_usd: 0.2, cached_input_price_per_1m_usd: 0.02 });
    const overage = await createPlan({
      name: "Cached overage",
      pricing_model: "subscription_overage",
      monthly_price_usd: 5,
      included_tokens: 1000,
      overage_price_per_1m_usd: 1,
      cached_input_price_per_1m_usd: 0,
    });
    expect(overage.body).toMatchObject({ overage_price_per_1m_usd: 1, cached_input_price_per_1m_usd: 0 });
    const plain = await createPlan({ name: "Uncached PAYG", pricing_model: "payg", input_price_per_1m_usd: 0.2 });
    expect(plain.body).toMatchObject({ cached_input_price_per_1m_usd: null });
    for (const plans of [await listPlans(), await publicPlans(hosterA.hosterId)]) {
      const price = (plan: Json) => plans.find((p) => p.product_id === plan.product_id)!.cached_input_price_per_1m_usd;
      expect([price(payg.body), price(overage.body), price(plain.body)]).toEqual([0.02, 0, null]);
    }

    const patch = (plan: Json, body: Json) =>
      call("PATCH", `/hosters/products/${String(plan.product_id)}`, { cookie: hosterA.cookie, body });
    // Lowering the input price below the cached price is refused, naming the cached price.
    const below = await patch(payg.body, { input_price_per_1m_usd: 0.01 });
    expect(below.status).toBe(400);
    expect(below.body).toMatchObject({ error: { code: "invalid_request", param: "cached_input_price_per_1m_usd" } });
    // null is refused (a set price stays set; the input price charges cached tokens as fresh ones).
    const cleared = await patch(payg.body, { cached_input_price_per_1m_usd: null });
    expect(cleared.status).toBe(400);
    expect(cleared.body).toMatchObject({ error: { code: "invalid_request", param: "cached_input_price_per_1m_usd" } });
    const both = await patch(payg.body, { input_price_per_1m_usd: 0.01, cached_input_price_per_1m_usd: 0.001 });
    expect(both.status).toBe(200);
    expect(both.body).toMatchObject({ input_price_per_1m_usd: 0.01, cached_input_price_per_1m_usd: 0.001 });
    const added = await patch(plain.body, { cached_input_price_per_1m_usd: 0.2 });
    expect(added.body).toMatchObject({ cached_input_price_per_1m_usd: 0.2 });

    for (const [body, what] of [
      [{ pricing_model: "payg", input_price_per_1m_usd: 0.2, cached_input_price_per_1m_usd: 0.3 }, "above input"],
      [
        {
          pricing_model: "subscription_overage",
          monthly_price_usd: 5,
          included_tokens: 1000,
          overage_price_per_1m_usd: 1,
          cached_input_price_per_1m_usd: 1.5,
        },
        "above overage",
      ],
      [{ pricing_model: "free", cached_input_price_per_1m_usd: 0 }, "free"],
      [
        {
          pricing_model: "subscription",
          monthly_price_usd: 5,
          included_tokens: 1000,
          cached_input_price_per_1m_usd: 0,
        },
        "subscription",
      ],
      [{ pricing_model: "payg", input_price_per_1m_usd: 0.2, cached_input_price_per_1m_usd: -0.1 }, "negative"],
    ] as const) {
      const res = await createPlan({ name: `Refused ${what}`, ...body });
      expect({ what, status: res.status }).toEqual({ what, status: 400 });
      expect(res.body).toMatchObject({ error: { code: "invalid_request", param: "cached_input_price_per_1m_usd" } });
    }
  });

  it("refuses invalid terms with 400 naming the field", async () => {
    const before = (await listPlans()).length;
    const cases: Array<[unknown, string]> = [
      [{ pricing_model: "free" }, "name"],
      [{ name: "No model" }, "pricing_model"],
      [{ name: "Odd", pricing_model: "lifetime" }, "pricing_model"],
      [{ name: "Empty payg", pricing_model: "payg" }, "input_price_per_1m_usd"],
      [{ name: "No price", pricing_model: "subscription", included_tokens: 1000 }, "monthly_price_usd"],
      [{ name: "Mixed", pricing_model: "free", monthly_price_usd: 5 }, "monthly_price_usd"],
      [
        { name: "Huge", pricing_model: "subscription", monthly_price_usd: 1e30, included_tokens: 1 },
        "monthly_price_usd",
      ],
      [{ name: "Negative", pricing_model: "payg", input_price_per_1m_usd: -1 }, "input_price_per_1m_usd"],
      [{ name: "Fast", pricing_model: "free", rpm_limit: 1e300 }, "rpm_limit"],
      [{ name: "Half", pricing_model: "free", max_concurrent: 1.5 }, "max_concurrent"],
      [{ name: "Text", pricing_model: "free", tpm_limit: "1000" }, "tpm_limit"],
      [{ name: 42, pricing_model: "free" }, "name"],
      [
        { name: "Open monthly", pricing_model: "subscription", monthly_price_usd: 5, included_tokens: 1, open: true },
        "open",
      ],
      [{ name: "Open?", pricing_model: "free", open: "yes" }, "open"],
    ];
    for (const [body, param] of cases) {
      const res = await createPlan(body);
      expect({ body, status: res.status }).toEqual({ body, status: 400 });
      expect(res.body).toMatchObject({ error: { type: "invalid_request_error", code: "invalid_request", param } });
    }
    const malformed = await fetch(`${system.url}/hosters/products`, {
      method: "POST",
      headers: { cookie: hosterA.cookie, "content-type": "application/json" },
      body: "{not json",
    });
    expect(malformed.status).toBe(400);
    expect((await listPlans()).length).toBe(before);
  });

  it("refuses fields a hoster may not set (mass assignment)", async () => {
    const before = await listPlans();
    for (const extra of [
      { hoster_id: hosterB.hosterId },
      { status: "archived" },
      { product_id: "00000000-0000-4000-8000-000000000000" },
      { created_at: "2020-01-01T00:00:00Z" },
    ]) {
      const res = await createPlan({ name: "Sneaky", pricing_model: "free", ...extra });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: { code: "invalid_request", param: Object.keys(extra)[0] } });
    }
    const plan = (await createPlan({ name: "Fixed kind", pricing_model: "free" })).body;
    for (const extra of [{ pricing_model: "payg" }, { status: "active" }, { hoster_id: hosterB.hosterId }]) {
      const res = await call("PATCH", `/hosters/products/${String(plan.product_id)}`, {
        cookie: hosterA.cookie,
        body: extra,
      });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ error: { code: "invalid_request", param: Object.keys(extra)[0] } });
    }
    expect(await listPlans()).toEqual([...before, plan]);
  });

  it("needs a hoster session: 401 without one, 403 for a customer", async () => {
    for (const [method, path] of [
      ["GET", "/hosters/products"],
      ["POST", "/hosters/products"],
      ["PATCH", "/hosters/products/00000000-0000-4000-8000-000000000000"],
      ["POST", "/hosters/products/00000000-0000-4000-8000-000000000000/archive"],
    ] as const) {
      const body = method === "GET" ? undefined : { name: "x", pricing_model: "free" };
      const anonymous = await call(method, path, { body });
      expect(anonymous.status).toBe(401);
      expect(anonymous.body).toMatchObject({ error: { code: "unauthenticated" } });
      const asCustomer = await call(method, path, { body, cookie: customer.cookie });
      expect(asCustomer.status).toBe(403);
      expect(asCustomer.body).toMatchObject({ error: { type: "permission_error", code: "forbidden" } });
      // An API key is not a session either.
      const res = await fetch(`${system.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${customer.apiKey}` },
      });
      expect(res.status).toBe(401);
    }
  });

  it("refuses a cookie-authenticated change from a foreign Origin", async () => {
    const target = (await createPlan({ name: "Target", pricing_model: "free" })).body;
    const before = await listPlans();
    const create = await call("POST", "/hosters/products", {
      cookie: hosterA.cookie,
      origin: "https://evil.example",
      body: { name: "Forged", pricing_model: "free" },
    });
    expect(create.status).toBe(403);
    expect(create.body).toMatchObject({ error: { code: "forbidden" } });
    const edit = await call("PATCH", `/hosters/products/${String(target.product_id)}`, {
      cookie: hosterA.cookie,
      origin: "https://evil.example",
      body: { name: "Forged" },
    });
    expect(edit.status).toBe(403);
    const archive = await call("POST", `/hosters/products/${String(target.product_id)}/archive`, {
      cookie: hosterA.cookie,
      origin: "null",
    });
    expect(archive.status).toBe(403);
    expect(await listPlans()).toEqual(before);

    // The site's own pages may.
    const own = await call("POST", "/hosters/products", {
      cookie: hosterA.cookie,
      origin: system.url,
      body: { name: "From the portal", pricing_model: "free" },
    });
    expect(own.status).toBe(201);
  });

  it("documents the routes in the OpenAPI document", async () => {
    const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as { paths: Record<string, object> };
    expect(Object.keys(doc.paths["/hosters/products"]!).sort()).toEqual(["get", "post"]);
    expect(Object.keys(doc.paths["/hosters/products/{product_id}"]!)).toEqual(["patch"]);
    expect(Object.keys(doc.paths["/hosters/products/{product_id}/archive"]!)).toEqual(["post"]);
    // The cached-input price, in the bodies and in the plan they answer with.
    type Operation = {
      requestBody?: { content: Record<string, { schema: { properties: Json } }> };
      responses: Record<string, { content: Record<string, { schema: { properties: Json } }> }>;
    };
    const operations = doc.paths as Record<string, Record<string, Operation>>;
    const post = operations["/hosters/products"]!.post!;
    const patch = operations["/hosters/products/{product_id}"]!.patch!;
    for (const operation of [post, patch]) {
      expect(operation.requestBody!.content["application/json"]!.schema.properties).toHaveProperty(
        "cached_input_price_per_1m_usd",
      );
    }
    expect(post.responses["201"]!.content["application/json"]!.schema.properties).toHaveProperty(
      "cached_input_price_per_1m_usd",
    );
  });

  it("declares what comes back on every documented route: a 2xx schema and the error shape", async () => {
    type Operation = { responses?: Record<string, { content?: Record<string, { schema?: object }> }> };
    const doc = (await (await fetch(`${system.url}/docs/json`)).json()) as {
      paths: Record<string, Record<string, Operation>>;
    };
    const operations = Object.entries(doc.paths).flatMap(([path, methods]) =>
      Object.entries(methods).map(([method, operation]) => ({ route: `${method.toUpperCase()} ${path}`, operation })),
    );
    expect(operations.length).toBeGreaterThanOrEqual(30);
    const lacking = operations
      .filter(({ operation }) => {
        const responses = Object.entries(operation.responses ?? {});
        const success = responses.some(
          ([status, r]) => /^2\d\d$/.test(status) && Object.values(r.content ?? {}).some((c) => c.schema),
        );
        return !success || !responses.some(([status]) => status === "4XX");
      })
      .map(({ route }) => route);
    expect(lacking).toEqual([]);
  });

  it("keeps each hoster's plans its own: another hoster gets 404", async () => {
    const plan = (await createPlan({ name: "A only", pricing_model: "payg", output_price_per_1m_usd: 1 })).body;
    const id = String(plan.product_id);
    for (const [method, path, body] of [
      ["PATCH", `/hosters/products/${id}`, { name: "Taken by B" }],
      ["POST", `/hosters/products/${id}/archive`, undefined],
      ["PATCH", "/hosters/products/00000000-0000-4000-8000-000000000000", { name: "Nobody's" }],
      ["PATCH", "/hosters/products/not-an-id", { name: "Nobody's" }],
    ] as const) {
      const res = await call(method, path, { cookie: hosterB.cookie, body });
      expect(res.status).toBe(404);
      expect(res.body).toEqual({
        error: { message: "No such product.", type: "invalid_request_error", param: "product_id", code: "not_found" },
      });
    }
    expect((await listPlans(hosterB.cookie)).map((p) => p.product_id)).not.toContain(id);
    expect((await listPlans()).find((p) => p.product_id === id)).toEqual(plan);
  });
});
