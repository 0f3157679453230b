import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// The API side of the web portal (docs/portal.md#how-it-talks-to-the-api): the customer routes take
// the session cookie, the CSRF guard covers them, and the playground's session key lives and dies
// with the session.
let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

async function loggedIn() {
  const account = await signUp(system.url);
  const res = await fetch(`${system.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email: account.email, password: "correct horse battery staple" }),
  });
  expect(res.status).toBe(200);
  return { ...account, cookie: res.headers.getSetCookie()[0]!.split(";")[0]! };
}

const origin = () => new URL(system.url).origin;

describe("customer routes with the session cookie", () => {
  it("reads usage, keys, subscriptions, hosters and models as the logged-in account", async () => {
    const { cookie, email } = await loggedIn();
    const usage = await fetch(`${system.url}/v1/usage`, { headers: { cookie } });
    expect(usage.status).toBe(200);
    expect(await usage.json()).toMatchObject({ customer: email, tier: "free", credit_balance_usd: 5 });
    for (const path of ["/v1/keys", "/v1/subscriptions", "/v1/hosters", "/v1/models", "/v1/usage/tokens"]) {
      expect((await fetch(`${system.url}${path}`, { headers: { cookie } })).status, path).toBe(200);
    }
  });

  it("creates and revokes a key from this site, and refuses the same calls from another site", async () => {
    const { cookie } = await loggedIn();
    const foreign = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: { cookie, origin: "https://evil.example", "content-type": "application/json" },
      body: JSON.stringify({ name: "x" }),
    });
    expect(foreign.status).toBe(403);
    const noOrigin = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: { cookie, "sec-fetch-site": "cross-site", "content-type": "application/json" },
      body: JSON.stringify({ name: "x" }),
    });
    expect(noOrigin.status).toBe(403);

    const created = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: { cookie, origin: origin(), "content-type": "application/json" },
      body: JSON.stringify({ name: "from the portal" }),
    });
    expect(created.status).toBe(201);
    const key = (await created.json()) as { key_id: string; api_key: string };
    const revoke = (headers: Record<string, string>) =>
      fetch(`${system.url}/v1/keys/${key.key_id}`, { method: "DELETE", headers: { cookie, ...headers } });
    expect((await revoke({ origin: "https://evil.example" })).status).toBe(403);
    expect((await revoke({ origin: origin() })).status).toBe(200);
  });

  it("never lets the cookie call chat: a chat request needs a key", async () => {
    const { cookie } = await loggedIn();
    const res = await fetch(`${system.url}/v1/chat/completions`, {
      method: "POST",
      headers: { cookie, origin: origin(), "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(401);
  });

  it("answers 401 for a session that does not exist", async () => {
    const res = await fetch(`${system.url}/v1/usage`, { headers: { cookie: "mk_session=mks_nope" } });
    expect(res.status).toBe(401);
  });
});

describe("the playground's session key", () => {
  it("is listed as a session key, works for chat, and stops at logout", async () => {
    const { cookie } = await loggedIn();
    const minted = await fetch(`${system.url}/auth/session-key`, {
      method: "POST",
      headers: { cookie, origin: origin() },
    });
    expect(minted.status).toBe(201);
    const key = (await minted.json()) as { api_key: string; key_id: string; session_key: boolean; expires_at: string };
    expect(key).toMatchObject({ session_key: true });
    expect(Date.parse(key.expires_at)).toBeGreaterThan(Date.now());

    const listed = (await (await fetch(`${system.url}/v1/keys`, { headers: { cookie } })).json()) as {
      data: Array<{ key_id: string; session_key: boolean; name: string }>;
    };
    expect(listed.data.find((k) => k.key_id === key.key_id)).toMatchObject({ session_key: true });

    const chat = () =>
      fetch(`${system.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key.api_key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
      });
    expect((await chat()).status).toBe(200);

    expect((await fetch(`${system.url}/auth/logout`, { method: "POST", headers: { cookie } })).status).toBe(200);
    expect((await chat()).status).toBe(401);
  });

  it("is refused to a request from another site", async () => {
    const { cookie } = await loggedIn();
    const res = await fetch(`${system.url}/auth/session-key`, {
      method: "POST",
      headers: { cookie, origin: "https://evil.example" },
    });
    expect(res.status).toBe(403);
  });
});
