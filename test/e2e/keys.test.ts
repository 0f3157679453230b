import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

const auth = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });

describe("API keys", () => {
  it("a revoked key gets 401 on the very next request", async () => {
    const { apiKey } = await signUp(system.url);
    const created = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: auth(apiKey),
      body: JSON.stringify({ name: "ci" }),
    });
    expect(created.status).toBe(201);
    const second = (await created.json()) as { key_id: string; api_key: string };
    // Warm the principal cache, so the revocation has something to drop.
    expect((await fetch(`${system.url}/v1/usage`, { headers: auth(second.api_key) })).status).toBe(200);

    const revoked = await fetch(`${system.url}/v1/keys/${second.key_id}`, { method: "DELETE", headers: auth(apiKey) });
    expect(revoked.status).toBe(200);

    const after = await fetch(`${system.url}/v1/usage`, { headers: auth(second.api_key) });
    expect(after.status).toBe(401);
    expect(await after.json()).toMatchObject({ error: { type: "authentication_error", code: "invalid_api_key" } });
    // The other key still works.
    expect((await fetch(`${system.url}/v1/usage`, { headers: auth(apiKey) })).status).toBe(200);
  });

  it("lists keys without their secrets", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/keys`, { headers: auth(apiKey) });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain(apiKey);
    expect(JSON.parse(text).data[0]).toMatchObject({ prefix: apiKey.slice(0, 10) });
  });
});
