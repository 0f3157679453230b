import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros, splitRevenue, usdToMicros } from "@mkt/runtime/money";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";
import { apiCall, type Json } from "./api-call.ts";

/**
 * The spec's whole story, as a hoster and a customer live it, with the `openai` SDK and plain
 * fetch against the real processes: invite → register → login → one plan of each pricing model →
 * list hosters → subscribe → chat (stream and not) → usage, breakdown and earnings agree to the
 * micro-dollar → pause → resume → cancel.
 */

let system: RunningSystem;
let hoster: RegisteredHoster;
beforeAll(async () => {
  system = await startSystem();
  hoster = await registerHoster(system, { name: "Story Hoster" });
});
afterAll(async () => {
  await hoster?.server.close();
  await system?.close();
});

const call = (method: string, path: string, auth: { cookie?: string; apiKey?: string } = {}, body?: unknown) =>
  apiCall(system.url, method, path, { cookie: auth.cookie, key: auth.apiKey, body });

const micros = (usd: number) => usdToMicros(usd);

describe("the marketplace, end to end", () => {
  it("walks from invite to cancelled subscription with every cent accounted for", async () => {
    // The hoster logs in again (registration already did once) and sells four plans.
    const login = await fetch(`${system.url}/hosters/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: hoster.email, password: hoster.password }),
    });
    expect(login.status).toBe(200);
    const cookie = login.headers.getSetCookie()[0]!.split(";")[0]!;

    const plans = {
      free: { name: "Free tier", pricing_model: "free" },
      payg: { name: "Pay as you go", pricing_model: "payg", input_price_per_1m_usd: 2, output_price_per_1m_usd: 6 },
      subscription: {
        name: "Monthly",
        pricing_model: "subscription",
        monthly_price_usd: 1.5,
        included_tokens: 100_000,
      },
      subscription_overage: {
        name: "Monthly + overage",
        pricing_model: "subscription_overage",
        monthly_price_usd: 1,
        included_tokens: 50_000,
        overage_price_per_1m_usd: 4,
      },
    };
    const productIds: Record<string, string> = {};
    for (const [kind, plan] of Object.entries(plans)) {
      const created = await call("POST", "/hosters/products", { cookie }, plan);
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body).toMatchObject({ ...plan, rpm_limit: 60, tpm_limit: 100_000, max_concurrent: 5 });
      productIds[kind] = created.body.product_id as string;
    }

    // A customer finds the hoster and its plans.
    const customer = await signUp(system.url);
    const listed = await call("GET", "/v1/hosters", { apiKey: customer.apiKey });
    const entry = (listed.body.data as Json[]).find((h) => h.hoster_id === hoster.hosterId)!;
    expect(entry).toMatchObject({ name: "Story Hoster", status: "healthy" });
    expect((entry.plans as Json[]).map((p) => p.pricing_model).sort()).toEqual(Object.keys(plans).sort());

    // Subscribing to the pay-as-you-go plan costs nothing up front and gives a scoped key.
    const before = await waitForUsage<Json>(system.url, customer.apiKey, () => true);
    const payg = await call("POST", "/v1/subscriptions", { apiKey: customer.apiKey }, { product_id: productIds.payg });
    expect(payg.status, JSON.stringify(payg.body)).toBe(201);
    expect(payg.body).toMatchObject({ product_name: "Pay as you go", status: "active" });
    const scopedKey = payg.body.api_key as string;
    expect(scopedKey).toEqual(expect.any(String));

    // Chat through the hoster with `auto`, non-streaming and streaming, with the official SDK.
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: scopedKey, maxRetries: 0 });
    const completion = await client.chat.completions.create({
      model: "auto",
      max_tokens: 40,
      messages: [{ role: "user", content: "Hello from the story test." }],
    });
    expect(completion.model).toBe(hoster.modelId);
    expect(completion.choices[0]!.message.content).toBeTruthy();
    const stream = await client.chat.completions.create({
      model: "auto",
      max_tokens: 30,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "And once more, streamed." }],
    });
    let streamedUsage: { prompt_tokens: number; completion_tokens: number } | undefined;
    for await (const chunk of stream) if (chunk.usage) streamedUsage = chunk.usage;
    expect(streamedUsage).toBeDefined();

    const input = completion.usage!.prompt_tokens + streamedUsage!.prompt_tokens;
    const output = completion.usage!.completion_tokens + streamedUsage!.completion_tokens;
    const price = { input: micros(2), output: micros(6) };
    // Each request is priced and split on its own: sum the per-request shares.
    const costs = [
      costMicros(
        BigInt(completion.usage!.prompt_tokens),
        BigInt(completion.usage!.completion_tokens),
        price.input,
        price.output,
      ),
      costMicros(
        BigInt(streamedUsage!.prompt_tokens),
        BigInt(streamedUsage!.completion_tokens),
        price.input,
        price.output,
      ),
    ];
    const totalCost = costs[0]! + costs[1]!;
    const hosterShare = costs.reduce((sum, c) => sum + splitRevenue(c, true).hosterEarned, 0n);
    expect(totalCost).toBeGreaterThan(0n);

    // Usage: both requests counted, the credit reduced by exactly their cost.
    const usage = await waitForUsage<Json>(system.url, customer.apiKey, (u) => u.usage_30d.total_requests === 2);
    expect(usage.usage_30d).toMatchObject({
      total_input_tokens: input,
      total_output_tokens: output,
      total_cost_microdollars: Number(totalCost),
    });
    expect(micros(before.credit_balance_usd) - micros(usage.credit_balance_usd)).toBe(totalCost);

    // Breakdown: the hoster's model with the 20/80 split of the posted shares.
    const breakdown = await call("GET", "/v1/usage/breakdown?days=1", { apiKey: customer.apiKey });
    expect(breakdown.status).toBe(200);
    const byModel = (breakdown.body.by_model as Json[]).find((m) => m.model_id === hoster.modelId)!;
    expect(byModel).toMatchObject({ provider: "hoster", requests: 2, input_tokens: input, output_tokens: output });
    expect(micros(byModel.total_cost_usd)).toBe(totalCost);
    expect(micros(byModel.hoster_earned_usd)).toBe(hosterShare);
    expect(micros(byModel.platform_fee_usd)).toBe(totalCost - hosterShare);

    // A monthly plan: the price leaves the balance at once, 80% of it to the hoster.
    const monthly = await call(
      "POST",
      "/v1/subscriptions",
      { apiKey: customer.apiKey },
      { product_id: productIds.subscription },
    );
    expect(monthly.status, JSON.stringify(monthly.body)).toBe(201);
    const afterMonthly = await waitForUsage<Json>(system.url, customer.apiKey, () => true);
    expect(micros(usage.credit_balance_usd) - micros(afterMonthly.credit_balance_usd)).toBe(micros(1.5));

    // The hoster's earnings are exactly its posted shares: usage and the monthly fee.
    const earnings = await call("GET", "/v1/earnings?days=1", { cookie });
    expect(earnings.status, JSON.stringify(earnings.body)).toBe(200);
    const feeShare = splitRevenue(micros(1.5), true).hosterEarned;
    expect(micros(earnings.body.total_earned_usd)).toBe(hosterShare + feeShare);
    expect(earnings.body).toMatchObject({ payout_threshold_usd: 10, payout_eligible: false });
    const byModelEarnings = await call("GET", "/v1/earnings/by-model?days=1", { cookie });
    expect(byModelEarnings.status).toBe(200);
    const earnedOnModel = (byModelEarnings.body.by_model as Json[]).find((m) => m.model_id === hoster.modelId)!;
    expect(earnedOnModel).toMatchObject({ requests: 2, input_tokens: input, output_tokens: output });
    expect(micros(earnedOnModel.earned_usd)).toBe(hosterShare);
    expect(micros(earnedOnModel.gross_usd)).toBe(totalCost);

    // The hoster pauses the subscriber: the exact message, then back to work after resume.
    const subscriptionId = payg.body.subscription_id as string;
    expect((await call("POST", `/hosters/subscribers/${subscriptionId}/pause`, { cookie })).status).toBe(200);
    const paused = await call(
      "POST",
      "/v1/chat/completions",
      { apiKey: scopedKey },
      {
        model: "auto",
        max_tokens: 5,
        messages: [{ role: "user", content: "Still there?" }],
      },
    );
    expect(paused.status).toBe(403);
    expect(paused.body.error).toMatchObject({
      type: "permission_error",
      code: "subscription_paused",
      message: "Your access has been temporarily paused by the hoster.",
    });
    expect((await call("POST", `/hosters/subscribers/${subscriptionId}/resume`, { cookie })).status).toBe(200);
    const resumed = await client.chat.completions.create({
      model: "auto",
      max_tokens: 5,
      messages: [{ role: "user", content: "Back again." }],
    });
    expect(resumed.choices[0]!.message.content).toBeTruthy();

    // Cancelling kills the scoped key at once.
    const cancelled = await call("DELETE", `/v1/subscriptions/${subscriptionId}`, { apiKey: customer.apiKey });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body).toMatchObject({ subscription_id: subscriptionId, status: "cancelled" });
    const dead = await call("GET", "/v1/models", { apiKey: scopedKey });
    expect(dead.status).toBe(401);
    expect(dead.body.error).toMatchObject({ code: "invalid_api_key" });
  });
});
