import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";
import { apiCall, type CallOptions } from "./api-call.ts";

// A hoster edits a plan through the public API between a subscriber's renewals
// (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md): the subscriber renews on whichever of
// its own terms and the plan's favours it, field by field. Renewal passes run at the period ends
// the test reads from the API.
let system: RunningSystem;
let hoster: RegisteredHoster;

type Json = Record<string, unknown>;

const call = (method: string, path: string, options: CallOptions = {}) => apiCall(system.url, method, path, options);

const balance = async (key: string) => (await call("GET", "/v1/usage", { key })).body.credit_balance_usd as number;
const subscription = async (key: string) => ((await call("GET", "/v1/subscriptions", { key })).body.data as Json[])[0]!;
const editPlan = (productId: string, body: Json) =>
  call("PATCH", `/hosters/products/${productId}`, { cookie: hoster.cookie, body });
const chat = (key: string, maxTokens: number) =>
  call("POST", "/v1/chat/completions", {
    key,
    body: { model: "auto", max_tokens: maxTokens, messages: [{ role: "user", content: "Hi" }] },
  });

/** Runs a renewal pass at the subscription's period end, as billing's scheduler would then. */
async function renewAtPeriodEnd(key: string) {
  const periodEnd = (await subscription(key)).period_end as string;
  // A pass skips a subscription whose row is locked at that moment (a lease heartbeat holds it
  // FOR SHARE for a few milliseconds); the next pass renews it, as in production.
  await expect
    .poll(
      async () => {
        await system.renewSubscriptions(new Date(periodEnd));
        return (await subscription(key)).period_start;
      },
      { timeout: 10_000 },
    )
    .toBe(periodEnd);
  return periodEnd;
}

beforeAll(async () => {
  system = await startSystem();
  // Answers longer than any cap here, so the cap a request was served with is its answer's length.
  hoster = await registerHoster(system, { name: "Editing Hoster", serverEnv: { DEMO_COMPLETION_TOKENS: "1000" } });
});
afterAll(async () => {
  await system?.close();
  await hoster?.server.close();
});

describe("a plan edited by its hoster, across a subscriber's renewals", () => {
  it("renews a 1 USD plan edited to 10,000 USD at 1 USD with its limits; a later cut and raise reach it", async () => {
    const created = await call("POST", "/hosters/products", {
      cookie: hoster.cookie,
      body: {
        name: "Pro",
        pricing_model: "subscription",
        monthly_price_usd: 1,
        included_tokens: 1_000_000,
        rpm_limit: 5,
        max_output_tokens: 50,
      },
    });
    expect(created.status).toBe(201);
    const productId = created.body.product_id as string;
    const { apiKey } = await signUp(system.url);
    const subscribed = await call("POST", "/v1/subscriptions", { key: apiKey, body: { product_id: productId } });
    expect(subscribed.status).toBe(201);
    const scopedKey = subscribed.body.api_key as string;
    expect(await balance(apiKey)).toBe(4);

    // The hoster raises the price 10,000-fold and cuts the limits.
    const raised = await editPlan(productId, { monthly_price_usd: 10_000, rpm_limit: 2, max_output_tokens: 20 });
    expect(raised.status).toBe(200);
    expect(raised.body).toMatchObject({ monthly_price_usd: 10_000, rpm_limit: 2, max_output_tokens: 20 });
    // New subscribers get the plan as it is now.
    const newcomer = await signUp(system.url);
    const refused = await call("POST", "/v1/subscriptions", { key: newcomer.apiKey, body: { product_id: productId } });
    expect(refused.status).toBe(402);

    const firstEnd = await renewAtPeriodEnd(apiKey);
    expect(await subscription(apiKey)).toMatchObject({
      status: "active",
      monthly_price_usd: 1,
      period_start: firstEnd,
    });
    expect(await balance(apiKey)).toBe(3);
    // Its own caps hold: 40 output tokens (over the plan's new 20) are served, 60 are lowered to its
    // 50, and the rate limit reported is its 5 requests a minute, not the plan's new 2.
    const within = await chat(scopedKey, 40);
    expect(within.status, JSON.stringify(within.body)).toBe(200);
    expect(within.body).toMatchObject({ usage: { completion_tokens: 40 } });
    expect(within.headers.get("x-ratelimit-limit-requests")).toBe("5");
    const over = await chat(scopedKey, 60);
    expect(over.status, JSON.stringify(over.body)).toBe(200);
    expect(over.body).toMatchObject({ usage: { completion_tokens: 50 }, choices: [{ finish_reason: "length" }] });

    // The hoster cuts the price below what the subscriber pays and raises the limits.
    const cut = await editPlan(productId, { monthly_price_usd: 0.5, rpm_limit: 30, max_output_tokens: 100 });
    expect(cut.status).toBe(200);
    const secondEnd = await renewAtPeriodEnd(apiKey);
    expect(await subscription(apiKey)).toMatchObject({
      status: "active",
      monthly_price_usd: 0.5,
      period_start: secondEnd,
    });
    expect(await balance(apiKey)).toBe(2.5);
    const raisedCap = await chat(scopedKey, 80);
    expect(raisedCap.status, JSON.stringify(raisedCap.body)).toBe(200);
    expect(raisedCap.body).toMatchObject({ usage: { completion_tokens: 80 } });
    expect(raisedCap.headers.get("x-ratelimit-limit-requests")).toBe("30");
  });
});
