import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

async function topUp(accountId: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${system.url}/admin/accounts/${accountId}/credits`, {
    method: "POST",
    headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function balance(apiKey: string): Promise<number> {
  const res = await fetch(`${system.url}/v1/usage`, { headers: { authorization: `Bearer ${apiKey}` } });
  return ((await res.json()) as { credit_balance_usd: number }).credit_balance_usd;
}

describe("POST /admin/accounts/{account_id}/credits", () => {
  it("needs the admin token", async () => {
    const { accountId, apiKey } = await signUp(system.url);
    for (const authorization of [undefined, "Bearer wrong", `Bearer ${apiKey}`]) {
      const res = await fetch(`${system.url}/admin/accounts/${accountId}/credits`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(authorization ? { authorization } : {}) },
        body: JSON.stringify({ amount_usd: 1 }),
      });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ error: { type: "authentication_error", code: "unauthenticated" } });
    }
    expect(await balance(apiKey)).toBe(5);
  });

  it("credits once per Idempotency-Key, and refuses the key reused with another amount", async () => {
    const { accountId, apiKey } = await signUp(system.url);
    const key = { "idempotency-key": randomUUID() };
    const first = await topUp(accountId, { amount_usd: 10.25 }, key);
    expect(first).toMatchObject({
      status: 200,
      body: { account_id: accountId, amount_usd: 10.25, credit_balance_usd: 15.25, replayed: false },
    });
    const retry = await topUp(accountId, { amount_usd: 10.25 }, key);
    expect(retry).toMatchObject({ status: 200, body: { credit_balance_usd: 15.25, replayed: true } });
    const conflict = await topUp(accountId, { amount_usd: 99 }, key);
    expect(conflict).toMatchObject({ status: 409, body: { error: { code: "idempotency_conflict" } } });
    expect(await balance(apiKey)).toBe(15.25);

    // Without a key every call is a new top-up.
    await topUp(accountId, { amount_usd: 1 });
    await topUp(accountId, { amount_usd: 1 });
    expect(await balance(apiKey)).toBe(17.25);
  });

  it("credits once when retries with one key race each other", async () => {
    const { accountId, apiKey } = await signUp(system.url);
    const key = { "idempotency-key": randomUUID() };
    const results = await Promise.all(Array.from({ length: 20 }, () => topUp(accountId, { amount_usd: 2 }, key)));
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(results.filter((r) => r.body.replayed === false)).toHaveLength(1);
    expect(await balance(apiKey)).toBe(7);

    // The ledger agrees: one top-up entry, balanced, and the wallet equals its postings.
    const db = new pg.Client({ connectionString: system.databaseUrl });
    await db.connect();
    try {
      const entries = await db.query(
        `select e.id, sum(p.amount_micros)::text as total from billing.journal_entries e
           join billing.ledger_postings p on p.entry_id = e.id
          where e.kind = 'top_up' and e.reference like $1 group by e.id`,
        [`${accountId}:%`],
      );
      expect(entries.rows).toEqual([{ id: expect.any(String), total: "0" }]);
      const wallet = await db.query(
        `select w.posted_micros::text as posted,
                (select sum(amount_micros) from billing.ledger_postings where ledger_account = $2)::text as postings
           from billing.wallets w where w.account_id = $1`,
        [accountId, `customer:${accountId}`],
      );
      expect(wallet.rows[0]).toEqual({ posted: "7000000", postings: "7000000" });
    } finally {
      await db.end();
    }
  });

  it("answers 404 for an unknown account and 400 for a bad amount", async () => {
    expect((await topUp(randomUUID(), { amount_usd: 1 })).body).toMatchObject({ error: { code: "not_found" } });
    expect((await topUp("not-an-id", { amount_usd: 1 })).status).toBe(404);
    const { accountId } = await signUp(system.url);
    for (const body of [{ amount_usd: 0 }, { amount_usd: -5 }, { amount_usd: "ten" }, {}, { amount_usd: 2_000_000 }]) {
      const res = await topUp(accountId, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error).toMatchObject({ code: "invalid_request", param: "amount_usd" });
    }
  });
});
