import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ledgerInvariants } from "../../services/billing/test/billing-harness.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

/*
 * A balance that pays exactly two requests, one at a time. Each request asks for max_tokens 1000
 * and the demo model writes 500 tokens, so with a prompt of p tokens (a few dozen at most) it holds
 * 1500 + p/2 micro-USD while it runs and costs 750 + p/2. A balance of 2,350 pays the second
 * request once the first has settled (2,350 − 750 − p/2 ≥ 1500 + p/2 for p ≤ 100), not while the
 * first's worst case is still held (2,350 − 1500 − p/2 < 1500 + p/2), and never a third
 * (2,350 − 1500 − p < 1500 + p/2). Billing settles at the production window, 250 ms.
 */
const WRITES = 500;
const MAX_TOKENS = 1000;

let system: RunningSystem;
let db: BillingDb;
beforeAll(async () => {
  system = await startSystem({
    billing: { SETTLE_BATCH_WINDOW_MS: "250", STARTING_CREDIT_USD: "0.00235" },
    model: { DEMO_COMPLETION_TOKENS: String(WRITES), DEMO_TOKENS_PER_SECOND: "100000" },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
});

const ask = (apiKey: string) =>
  postChat(system.url, apiKey, {
    model: "demo-small",
    max_tokens: MAX_TOKENS,
    messages: [{ role: "user", content: "Please write at length." }],
  });

/**
 * Two requests on `apiKey` back to back, both served; a third refused 402 with `code`. Another
 * account's request settles a batch just before: the settler is inside its window when the first
 * request ends, so that request's worst case is still held when the second arrives.
 */
async function twoThenRefused(otherKey: string, apiKey: string, code: string): Promise<void> {
  expect((await ask(otherKey)).status).toBe(200);
  const one = await ask(apiKey);
  expect(one.status).toBe(200);
  await one.text();
  const two = await ask(apiKey);
  const body = await two.text();
  expect(two.status, body).toBe(200);
  const three = await ask(apiKey);
  expect(three.status).toBe(402);
  expect(((await three.json()) as { error: { code: string } }).error.code).toBe(code);
}

describe("a balance that pays two requests, one at a time", () => {
  it("serves both sent back to back at the 250 ms settlement window, and refuses the third 402", async () => {
    const other = await signUp(system.url);
    const { apiKey, accountId } = await signUp(system.url);
    await twoThenRefused(other.apiKey, apiKey, "insufficient_credits");
    // Both charged, once each, and the balance never below zero.
    const [account] = await db.query<{ charged: string; posted: string }>(
      `select (select count(*) from usage_records where account_id = $1 and cost_micros > 0)::text as charged,
         (select posted_micros from wallets where account_id = $1)::text as posted`,
      [accountId],
    );
    expect(account!.charged).toBe("2");
    expect(BigInt(account!.posted)).toBeGreaterThanOrEqual(0n);
    await ledgerInvariants(db);
  });
});

describe("a key whose spend limit pays two requests, one at a time", () => {
  it("serves both sent back to back at the 250 ms settlement window, and refuses the third 402 key_limit_exceeded", async () => {
    const other = await signUp(system.url);
    const { apiKey: owner, accountId } = await signUp(system.url);
    // The account could pay many more: only the key's limit, the balance's figure above, binds.
    const topUp = await fetch(`${system.url}/admin/accounts/${accountId}/credits`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ amount_usd: 1 }),
    });
    expect(topUp.status).toBe(200);
    const created = await fetch(`${system.url}/v1/keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${owner}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "two requests", limit_usd: 0.00235, limit_reset: "daily" }),
    });
    expect(created.status).toBe(201);
    const { api_key: apiKey, key_id: keyId } = (await created.json()) as { api_key: string; key_id: string };

    await twoThenRefused(other.apiKey, apiKey, "key_limit_exceeded");
    const [charged] = await db.query<{ n: string }>(
      `select count(*)::text as n from usage_records where key_id = $1 and cost_micros > 0`,
      [keyId],
    );
    expect(charged!.n).toBe("2");
    await ledgerInvariants(db);
  });
});
