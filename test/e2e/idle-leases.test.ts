import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

/*
 * Sparse accounts with the production lease settings (LEASE_TTL_MS 2 s, LEASE_IDLE_MS left at its
 * default, a minute): many accounts each sending a request now and then keep their leases, so
 * their requests are admitted in memory, not each after a GrantLease; a burst of cold requests of
 * one account waits on one grant; and while an idle lease stays open the balance a user is shown
 * is what settlement left, not less the room the lease holds.
 */
const TTL_MS = "2000";
const ACCOUNTS = 50;
const EVERY_MS = 5_000;
const RUN_MS = 60_000;

let system: RunningSystem;
let db: BillingDb;
beforeAll(async () => {
  system = await startSystem({
    billing: { LEASE_TTL_MS: TTL_MS },
    // Every account signs up from this one address.
    accounts: { PRINCIPAL_TTL_MS: TTL_MS, SIGNUP_LIMIT_PER_IP_PER_HOUR: "1000" },
    model: { DEMO_COMPLETION_TOKENS: "4", DEMO_TOKENS_PER_SECOND: "100000" },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const chat = { model: "demo-small", max_tokens: 4, messages: [{ role: "user", content: "Hello there" }] };

/** `mkt_lease_grants_total{result="granted"}` on billing's metrics endpoint. */
async function grantsCounted(): Promise<number> {
  const metrics = await (await fetch(system.readyzUrls.billing.replace(/\/readyz$/, "/metrics"))).text();
  const line = metrics.split("\n").find((l) => l.startsWith('mkt_lease_grants_total{result="granted"}'));
  return Number(line?.split(" ")[1]);
}

async function shownBalanceMicros(apiKey: string): Promise<number> {
  const res = await fetch(`${system.url}/v1/usage`, { headers: { authorization: `Bearer ${apiKey}` } });
  const usage = (await res.json()) as { credit_balance_usd: number };
  return Math.round(usage.credit_balance_usd * 1e6);
}

describe("sparse accounts stay warm", () => {
  it("shows the balance settlement left while the account's idle lease stays open", async () => {
    const { apiKey, accountId } = await signUp(system.url);
    const before = await shownBalanceMicros(apiKey);
    const res = await postChat(system.url, apiKey, chat);
    expect(res.status).toBe(200);
    const { usage } = (await res.json()) as { usage: { cost: number } };
    const cost = Math.round(usage.cost * 1e6);
    expect(cost).toBeGreaterThan(0);
    const settled = () => db.figure(`select count(*)::text as v from usage_records where account_id = $1`, [accountId]);
    await expect.poll(settled, { timeout: 15_000 }).toBe(1n);
    // The lease is open and holds credit for a next request; the user is not shown it as spent.
    const lease = await db.query<{ status: string; held: string }>(
      `select status, held_micros::text as held from leases where account_id = $1`,
      [accountId],
    );
    expect(lease).toEqual([{ status: "open", held: expect.any(String) }]);
    expect(BigInt(lease[0]!.held)).toBeGreaterThan(0n);
    expect(await shownBalanceMicros(apiKey)).toBe(before - cost);
    // A top-up's answer shows the same balance, plus the top-up.
    const topUp = await fetch(`${system.url}/admin/accounts/${accountId}/credits`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ amount_usd: 1 }),
    });
    const topped = (await topUp.json()) as { credit_balance_usd: number };
    expect(Math.round(topped.credit_balance_usd * 1e6)).toBe(before - cost + 1_000_000);
  });

  it("admits a burst of cold requests of one account on one GrantLease", async () => {
    const { apiKey } = await signUp(system.url);
    const before = await grantsCounted();
    const answers = await Promise.all(Array.from({ length: 10 }, () => postChat(system.url, apiKey, chat)));
    expect(answers.map((res) => res.status)).toEqual(Array.from({ length: 10 }, () => 200));
    await Promise.all(answers.map((res) => res.text()));
    expect((await grantsCounted()) - before).toBe(1);
  });

  it("admits a cold request without max_tokens on one GrantLease", async () => {
    const { apiKey } = await signUp(system.url);
    const before = await grantsCounted();
    const res = await postChat(system.url, apiKey, { model: "demo-small", messages: chat.messages });
    expect(res.status).toBe(200);
    await res.text();
    // Its worst case, at the model's output cap, is known only once the prompt is counted: the
    // first grant lends room for it ahead, so the second step needs no grant of its own.
    expect((await grantsCounted()) - before).toBe(1);
  });

  it(
    `makes at most one grant per account per minute for ${ACCOUNTS} accounts each sending every ${EVERY_MS / 1000} s`,
    async () => {
      const accounts = await Promise.all(Array.from({ length: ACCOUNTS }, () => signUp(system.url)));
      const before = await grantsCounted();
      const startedAt = Date.now();
      const statuses: number[] = [];
      await Promise.all(
        accounts.map(async ({ apiKey }, i) => {
          // Spread over the interval, as independent clients are.
          await sleep((i * EVERY_MS) / ACCOUNTS);
          for (let sent = 0; sent < RUN_MS / EVERY_MS; sent++) {
            const due = startedAt + (i * EVERY_MS) / ACCOUNTS + sent * EVERY_MS;
            await sleep(Math.max(0, due - Date.now()));
            const res = await postChat(system.url, apiKey, chat);
            statuses.push(res.status);
            await res.text();
          }
        }),
      );
      const grants = (await grantsCounted()) - before;
      // Each account sends RUN_MS / EVERY_MS requests, one every EVERY_MS: RUN_MS of its traffic.
      const perAccountPerMinute = grants / ACCOUNTS / (RUN_MS / 60_000);
      console.log(
        `sparse accounts: ${statuses.length} requests in ${((Date.now() - startedAt) / 1000).toFixed(1)} s, ` +
          `${grants} grants: ${perAccountPerMinute.toFixed(2)} grants per account per minute`,
      );
      expect(statuses.filter((status) => status !== 200)).toEqual([]);
      expect(perAccountPerMinute).toBeLessThanOrEqual(1);
    },
    RUN_MS + 30_000,
  );
});
