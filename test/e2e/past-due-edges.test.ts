import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall, type CallOptions } from "./api-call.ts";

// A renewal the balance cannot pay makes the subscription past due, which refuses at once
// (docs/architecture.md#revocation-stops-at-once): its budgets in both edges' leases are fenced and
// recalled before the renewal pass goes on, so the very next request on either edge is 402; once
// topped up, the next pass renews it and both edges serve it again.
let system: RunningSystem;
let hoster: RegisteredHoster;

const call = (url: string, method: string, path: string, options: CallOptions = {}) =>
  apiCall(url, method, path, options);
const chat = (url: string, key: string) =>
  call(url, "POST", "/v1/chat/completions", {
    key,
    body: { model: "auto", max_tokens: 5, messages: [{ role: "user", content: "Hi" }] },
  });

beforeAll(async () => {
  system = await startSystem({ edges: 2 });
  hoster = await registerHoster(system, { name: "Renewing Hoster" });
});
afterAll(async () => {
  await system?.close();
  await hoster?.server.close();
});

describe("a subscription falling past due with budgets on two edges", () => {
  it("is refused 402 on both edges at once, and served on both again after a top-up renews it", async () => {
    const created = await call(system.url, "POST", "/hosters/products", {
      cookie: hoster.cookie,
      body: { name: "Monthly", pricing_model: "subscription", monthly_price_usd: 3, included_tokens: 1_000_000 },
    });
    expect(created.status).toBe(201);
    const { apiKey, accountId } = await signUp(system.url);
    const subscribed = await call(system.url, "POST", "/v1/subscriptions", {
      key: apiKey,
      body: { product_id: created.body.product_id },
    });
    expect(subscribed.status).toBe(201);
    const scopedKey = subscribed.body.api_key as string;
    // Both edges hold the subscription's budget in their lease (the second edge's grant recalls
    // the slots the first edge was lent beyond its finished request).
    for (const url of system.urls) expect((await chat(url, scopedKey)).status).toBe(200);

    // The period ends; 3 USD is more than the 2 USD left: past due.
    const periodEnd = (
      (await call(system.url, "GET", "/v1/subscriptions", { key: apiKey })).body.data as Array<Record<string, unknown>>
    )[0]!.period_end as string;
    await expect
      .poll(
        async () => {
          await system.renewSubscriptions(new Date(periodEnd));
          const data = (await call(system.url, "GET", "/v1/subscriptions", { key: apiKey })).body.data as Array<
            Record<string, unknown>
          >;
          return data[0]!.status;
        },
        { timeout: 10_000 },
      )
      .toBe("past_due");
    for (const url of system.urls) {
      const refused = await chat(url, scopedKey);
      expect(refused.status).toBe(402);
      expect(refused.body).toMatchObject({
        error: {
          code: "subscription_past_due",
          message: "This subscription's renewal is unpaid; top up your credit and it renews on the next attempt.",
        },
      });
    }

    // After a top-up the next renewal pass (here at the same period end: the test's clock) pays
    // the fee and makes it active: both edges serve it again.
    const topUp = await fetch(`${system.url}/admin/accounts/${accountId}/credits`, {
      method: "POST",
      headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ amount_usd: 10 }),
    });
    expect(topUp.status).toBeLessThan(300);
    await expect
      .poll(
        async () => {
          await system.renewSubscriptions(new Date(periodEnd));
          return (
            (await call(system.url, "GET", "/v1/subscriptions", { key: apiKey })).body.data as Array<
              Record<string, unknown>
            >
          )[0]!.status;
        },
        { timeout: 10_000 },
      )
      .toBe("active");
    // An edge that answered 402 refuses the subscription itself until its next heartbeat reply
    // (a client with no credit cannot make every request a recall), at most
    // LEASE_TTL_MS / 2 later.
    for (const url of system.urls) {
      await expect.poll(async () => (await chat(url, scopedKey)).status, { timeout: 15_000 }).toBe(200);
    }
  }, 90_000);
});
