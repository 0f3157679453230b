import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster } from "./hoster-fixture.ts";
import { startSystem, type RunningSystem } from "./system.ts";

// Security headers on every response, computed by helmet.
let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

function expectSecurityHeaders(res: Response, what: string) {
  expect(res.headers.get("x-content-type-options"), what).toBe("nosniff");
  expect(res.headers.get("referrer-policy"), what).toBe("no-referrer");
  expect(res.headers.get("x-frame-options"), what).toBe("DENY");
  const csp = res.headers.get("content-security-policy") ?? "";
  expect(csp, what).toContain("frame-ancestors 'none'");
  expect(csp, what).toContain("script-src 'self'");
  expect(csp, what).not.toMatch(/script-src[^;]*'unsafe-inline'/);
}

describe("security headers", () => {
  it("are on answers, errors, the docs and the portal", async () => {
    const cases: Array<[string, RequestInit?]> = [
      ["/healthz"],
      ["/v1/usage"], // 401 from the auth hook
      ["/no/such/route"], // 404
      ["/docs/"],
      ["/docs/json"],
      ["/portal/"],
      ["/v1/accounts", { method: "POST", headers: { "content-type": "application/json" }, body: "{" }], // 400
    ];
    for (const [path, init] of cases) {
      const res = await fetch(`${system.url}${path}`, init);
      await res.arrayBuffer();
      expectSecurityHeaders(res, path);
    }
  });
});

describe("the portal's files", () => {
  it("serves the page revalidated, hashed assets immutable, and the page for its own routes", async () => {
    const page = await fetch(`${system.url}/portal/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toContain("text/html");
    expect(page.headers.get("cache-control")).toBe("no-cache");
    const html = await page.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script
    const asset = /src="(\/portal\/assets\/[^"]+\.js)"/.exec(html)![1]!;
    const js = await fetch(`${system.url}${asset}`);
    expect(js.status).toBe(200);
    expect(js.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(js.headers.get("content-type")).toContain("javascript");

    const deep = await fetch(`${system.url}/portal/usage`);
    expect(deep.status).toBe(200);
    expect(await deep.text()).toBe(html);
    expect((await fetch(`${system.url}/portal/assets/missing-abc123.js`)).status).toBe(404);
    const bare = await fetch(`${system.url}/portal`, { redirect: "manual" });
    expect(bare.status).toBe(308);
    expect(bare.headers.get("location")).toBe("/portal/");
  });
});

describe("answers that carry a secret", () => {
  it("are Cache-Control: no-store: sign-up, key creation, subscription, hoster registration, log-in", async () => {
    const noStore = (res: Response, what: string) => expect(res.headers.get("cache-control"), what).toBe("no-store");
    const json = (body: unknown, extra: Record<string, string> = {}) => ({
      method: "POST",
      headers: { "content-type": "application/json", ...extra },
      body: JSON.stringify(body),
    });
    const email = `secret-${Date.now()}@example.com`;
    const password = "correct horse battery staple";
    const signUp = await fetch(`${system.url}/v1/accounts`, json({ email, password }));
    expect(signUp.status).toBe(201);
    noStore(signUp, "sign-up");
    const { api_key: apiKey } = (await signUp.json()) as { api_key: string };

    const key = await fetch(`${system.url}/v1/keys`, json({ name: "ci" }, { authorization: `Bearer ${apiKey}` }));
    expect(key.status).toBe(201);
    noStore(key, "key creation");

    const login = await fetch(`${system.url}/auth/login`, json({ email, password }));
    expect(login.status).toBe(200);
    noStore(login, "log-in");

    const hoster = await registerHoster(system, { name: "No-store Hoster" });
    try {
      expect(hoster.registrationHeaders.get("cache-control"), "hoster registration").toBe("no-store");
      const plan = await fetch(
        `${system.url}/hosters/products`,
        json({ name: "Free", pricing_model: "free" }, { cookie: hoster.cookie }),
      );
      const { product_id } = (await plan.json()) as { product_id: string };
      const subscription = await fetch(
        `${system.url}/v1/subscriptions`,
        json({ product_id }, { authorization: `Bearer ${apiKey}` }),
      );
      expect(subscription.status).toBe(201);
      noStore(subscription, "subscription");
      // A refusal of the same routes carries it as well (the hook runs first).
      noStore(await fetch(`${system.url}/v1/keys`, json({}, { authorization: "Bearer mk_wrong" })), "401 on keys");
    } finally {
      await hoster.server.close();
    }
    // Reads carry no secret and stay cacheable by default rules.
    const usage = await fetch(`${system.url}/v1/usage`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(usage.headers.get("cache-control")).not.toBe("no-store");
  });
});
