import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Two edges, as behind a load balancer; accounts' PRINCIPAL_TTL_MS is how long an edge trusts a cached key
// past its last check with accounts (docs/architecture.md#authentication).
const TTL = 1_000;
let system: RunningSystem;
beforeAll(async () => {
  // The edges take their leases' TTL from billing and their cached keys' from accounts.
  system = await startSystem({
    edges: 2,
    billing: { LEASE_TTL_MS: String(TTL) },
    accounts: { PRINCIPAL_TTL_MS: String(TTL) },
  });
});
afterAll(async () => {
  await system?.close();
});

const auth = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });
const usageStatus = async (url: string, key: string) => (await fetch(`${url}/v1/usage`, { headers: auth(key) })).status;

/** A second key on a fresh account, in use (cached) on both edges. */
async function keyInUse(): Promise<{ owner: string; key_id: string; api_key: string }> {
  const { apiKey: owner } = await signUp(system.url);
  const created = await fetch(`${system.url}/v1/keys`, {
    method: "POST",
    headers: auth(owner),
    body: JSON.stringify({ name: "ci" }),
  });
  expect(created.status).toBe(201);
  const key = (await created.json()) as { key_id: string; api_key: string };
  for (const url of system.urls) expect(await usageStatus(url, key.api_key)).toBe(200);
  return { owner, ...key };
}

describe("API keys", () => {
  it("a revoked key gets 401 on the very next request, on every edge", async () => {
    const { owner, key_id, api_key } = await keyInUse();
    const revoked = await fetch(`${system.urls[1]}/v1/keys/${key_id}`, { method: "DELETE", headers: auth(owner) });
    expect(revoked.status).toBe(200);

    for (const url of system.urls) {
      const after = await fetch(`${url}/v1/usage`, { headers: auth(api_key) });
      expect(after.status).toBe(401);
      expect(await after.json()).toMatchObject({ error: { type: "authentication_error", code: "invalid_api_key" } });
      // The other key still works.
      expect(await usageStatus(url, owner)).toBe(200);
    }
  });

  it("a key revoked without keys.revoked reaching the edges is refused on every edge within accounts' PRINCIPAL_TTL_MS", async () => {
    const { owner, key_id, api_key } = await keyInUse();
    // Straight in accounts' database: no announcement, so only the edges' revalidation can tell.
    const db = new pg.Client({ connectionString: system.databaseUrl, options: "-c search_path=accounts" });
    await db.connect();
    try {
      await db.query(`update api_keys set revoked_at = now() where id = $1`, [key_id]);
    } finally {
      await db.end();
    }
    const revokedAt = performance.now();
    const refusedAfter = await Promise.all(
      system.urls.map(async (url) => {
        while ((await usageStatus(url, api_key)) === 200) {
          if (performance.now() - revokedAt > 10 * TTL) throw new Error(`${url} kept serving the revoked key`);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        return performance.now() - revokedAt;
      }),
    );
    // One TTL − margin past the last check sent before the commit, plus one request's time.
    for (const ms of refusedAfter) expect(ms).toBeLessThan(TTL + 300);
    for (const url of system.urls) {
      expect(await usageStatus(url, api_key)).toBe(401);
      expect(await usageStatus(url, owner)).toBe(200);
    }
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
