import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

let system: RunningSystem;
let apiKey: string;
beforeAll(async () => {
  system = await startSystem();
  ({ apiKey } = await signUp(system.url));
});
afterAll(async () => {
  await system?.close();
});

async function post(path: string, body: string, key: string | null = apiKey) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key !== null) headers.authorization = `Bearer ${key}`;
  const res = await fetch(`${system.url}${path}`, { method: "POST", headers, body });
  return { status: res.status, body: (await res.json()) as { error: Record<string, unknown> } };
}

const chat = (body: unknown, key?: string | null) => post("/v1/chat/completions", JSON.stringify(body), key);

describe("bad input gets the documented status and an OpenAI-shaped error, never a 500", () => {
  it("malformed JSON → 400 invalid_request", async () => {
    const res = await post("/v1/chat/completions", '{"model": "auto", "messages": [');
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request" });
  });

  it("missing messages → 400 naming the field", async () => {
    const res = await chat({ model: "auto" });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: "invalid_request_error", param: "messages" });
  });

  it("unknown model → 404 model_not_found", async () => {
    const res = await chat({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(404);
    expect(res.body.error).toMatchObject({ code: "model_not_found" });
  });

  it("missing or wrong key → 401 invalid_api_key", async () => {
    const body = { model: "auto", messages: [{ role: "user", content: "hi" }] };
    for (const key of [null, "mk_not-a-real-key", "garbage"]) {
      const res = await chat(body, key);
      expect(res.status).toBe(401);
      expect(res.body.error).toMatchObject({ type: "authentication_error", code: "invalid_api_key" });
    }
  });

  it("e-mail taken (case-insensitively) → 409 email_taken", async () => {
    const email = `Taken-${Date.now()}@Example.com`;
    const first = await post("/v1/accounts", JSON.stringify({ email, password: "a long enough secret" }), null);
    expect(first.status).toBe(201);
    const again = await post(
      "/v1/accounts",
      JSON.stringify({ email: email.toLowerCase(), password: "a long enough secret" }),
      null,
    );
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: "email_taken" });
  });

  it("weak or missing password → 400 naming password", async () => {
    for (const body of [{ email: "weak@example.com", password: "short" }, { email: "none@example.com" }]) {
      const res = await post("/v1/accounts", JSON.stringify(body), null);
      expect(res.status).toBe(400);
      expect(res.body.error).toMatchObject({ type: "invalid_request_error", param: "password" });
    }
  });

  it("bad max_tokens → 400 naming it", async () => {
    const res = await chat({ model: "auto", messages: [{ role: "user", content: "hi" }], max_tokens: -5 });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ param: "max_tokens" });
  });
});
