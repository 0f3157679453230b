import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

const PASSWORD = "correct horse battery staple"; // what signUp uses

async function login(email: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${system.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ email, password: PASSWORD }),
  });
  const setCookie = res.headers.getSetCookie()[0] ?? "";
  return { res, setCookie, cookie: setCookie.split(";")[0]! };
}

/** GET /auth/session's answer when nobody is logged in: a 200, not an error. */
const NOBODY = { kind: null, subject_id: null, email: null, expires_at: null };

const whoAmI = (cookie: string) => fetch(`${system.url}/auth/session`, { headers: { cookie } });

describe("customer sessions", () => {
  it("answers GET /auth/session with a 200 naming nobody when no one is logged in", async () => {
    const res = await fetch(`${system.url}/auth/session`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(NOBODY);
    // Routes that need a session still answer 401.
    const key = await fetch(`${system.url}/auth/session-key`, { method: "POST" });
    expect(key.status).toBe(401);
  });

  it("sets an HttpOnly, SameSite=Lax cookie that identifies the session", async () => {
    const { email, accountId } = await signUp(system.url);
    const { res, setCookie, cookie } = await login(email);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ kind: "customer", account_id: accountId, email });
    expect(setCookie).toMatch(/^mk_session=mks_[A-Za-z0-9_-]+;/);
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("SameSite=Lax");
    expect(setCookie).not.toContain("Secure"); // the request went to 127.0.0.1

    const me = await whoAmI(cookie);
    expect(me.status).toBe(200);
    expect(await me.json()).toMatchObject({ kind: "customer", subject_id: accountId, email });
  });

  it("marks the cookie Secure when the site is not this machine", async () => {
    const { email } = await signUp(system.url);
    // fetch may not set Host, so this request is made with node:http, as a proxy would forward it.
    const setCookie = await new Promise<string>((resolve, reject) => {
      const req = request(
        `${system.url}/auth/login`,
        { method: "POST", headers: { host: "api.example.com", "content-type": "application/json" } },
        (res) => {
          res.resume();
          resolve(res.headers["set-cookie"]?.[0] ?? "");
        },
      );
      req.on("error", reject);
      req.end(JSON.stringify({ email, password: PASSWORD }));
    });
    expect(setCookie).toMatch(/^mk_session=mks_/);
    expect(setCookie).toContain("Secure");
  });

  it("rotates the session on login and kills it on logout", async () => {
    const { email } = await signUp(system.url);
    const first = await login(email);
    const second = await login(email, { cookie: first.cookie });
    expect(second.cookie).not.toBe(first.cookie);
    // The session presented with the second login was ended by it.
    expect(await (await whoAmI(first.cookie)).json()).toEqual(NOBODY);
    expect((await whoAmI(second.cookie)).status).toBe(200);

    const out = await fetch(`${system.url}/auth/logout`, { method: "POST", headers: { cookie: second.cookie } });
    expect(out.status).toBe(200);
    expect(out.headers.getSetCookie()[0]).toMatch(/^mk_session=;/);
    const after = await whoAmI(second.cookie);
    expect(after.status).toBe(200);
    expect(await after.json()).toEqual(NOBODY);
    // A call that needs the session still refuses the ended one.
    const needsSession = await fetch(`${system.url}/auth/session-key`, {
      method: "POST",
      headers: { cookie: second.cookie },
    });
    expect(needsSession.status).toBe(401);
    expect(await needsSession.json()).toMatchObject({
      error: { type: "authentication_error", code: "unauthenticated" },
    });
  });

  it("refuses wrong credentials with 401 invalid_credentials and no cookie", async () => {
    const { email } = await signUp(system.url);
    const res = await fetch(`${system.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email, password: "wrong password" }),
    });
    expect(res.status).toBe(401);
    expect(res.headers.getSetCookie()).toEqual([]);
    expect(await res.json()).toMatchObject({ error: { code: "invalid_credentials" } });
    const forged = await whoAmI("mk_session=mks_" + "a".repeat(43));
    expect([forged.status, await forged.json()]).toEqual([200, NOBODY]);
  });
});

describe("POST /admin/invites", () => {
  it("creates single-use codes for the admin only", async () => {
    const denied = await fetch(`${system.url}/admin/invites`, { method: "POST" });
    expect(denied.status).toBe(401);
    const res = await fetch(`${system.url}/admin/invites`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ count: 3 }),
    });
    expect(res.status).toBe(201);
    const { data } = (await res.json()) as { data: Array<{ invite_code: string }> };
    expect(data).toHaveLength(3);
    expect(new Set(data.map((i) => i.invite_code)).size).toBe(3);
    for (const { invite_code } of data) expect(invite_code).toMatch(/^inv_[A-Za-z0-9_-]{32}$/);
  });
});
