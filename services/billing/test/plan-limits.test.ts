import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import type { AuthorizeRequest, AuthorizeResponse } from "@mkt/proto/billing/v1/billing";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { ProductTerms } from "@mkt/proto/registry/v1/registry";
import { startTestAccounts, type TestAccounts } from "../../accounts/test/accounts-harness.ts";
import { entities } from "../src/entities.ts";
import { settleUsageBatch } from "../src/settlement/settle-batch.ts";
import { authorizeRequest, ledgerInvariants, startTestBilling, waitFor, type TestBilling } from "./billing-harness.ts";
import { startRegistryDouble, type RegistryDouble } from "./registry-double.ts";
import { refusal } from "@mkt/testkit/refusal";

// A subscription's requests are priced and limited by its plan's terms snapshot. Real accounts
// (scoped keys) and a registry double serving the plans; billing's clock is the test's, 30 s into
// a UTC minute, so the minute windows reset in 30 s.
const log = createLogger("plan-limits-test", "silent");
let now = new Date("2026-03-10T10:00:30.000Z");
let accounts: TestAccounts;
let registry: RegistryDouble;
let t: TestBilling;
let orm: Orm;
beforeAll(async () => {
  accounts = await startTestAccounts();
  registry = await startRegistryDouble(log);
  t = await startTestBilling(
    { ACCOUNTS_ADDR: `127.0.0.1:${accounts.accounts.port}`, REGISTRY_ADDR: `127.0.0.1:${registry.port}` },
    { clock: () => now },
  );
  orm = await openDatabase({
    url: t.config.DATABASE_URL,
    schema: "billing",
    entities,
    migrations: [],
    migrate: false,
    log,
  });
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
  await registry?.close();
  await accounts?.close();
});

interface Subscriber {
  accountId: string;
  subscriptionId: string;
  hosterId: string;
}

/** A fresh customer subscribed to `plan` (a new plan from `terms` when given terms). */
async function subscriber(plan: { productId: string; hosterId: string }): Promise<Subscriber> {
  const { account } = await accounts.signUp();
  const accountId = account!.accountId;
  const { subscription } = await t.client.createSubscription({
    accountId,
    productId: plan.productId,
    idempotencyKey: "",
  });
  return { accountId, subscriptionId: subscription!.subscriptionId, hosterId: plan.hosterId };
}

const planOf = (terms: Partial<ProductTerms> & Pick<ProductTerms, "pricingModel">) => registry.addProduct(terms);
const subscribed = async (terms: Partial<ProductTerms> & Pick<ProductTerms, "pricingModel">) =>
  subscriber(planOf(terms));

/** An Authorize request as the edge sends one for a scoped key: registry's hoster route, priced 0. */
function scoped(s: Subscriber, overrides: Partial<AuthorizeRequest> = {}): AuthorizeRequest {
  return authorizeRequest({
    accountId: s.accountId,
    subscriptionId: s.subscriptionId,
    provider: "hoster",
    hosterId: s.hosterId,
    modelId: "llama-3-8b.gguf",
    inputPricePer1mMicros: 0n,
    outputPricePer1mMicros: 0n,
    contextWindow: 32_768n,
    maxOutputTokensCap: 32_768n,
    ...overrides,
  });
}

/** Authorizes, then settles the request with the given token counts (as registry would report). */
async function served(req: AuthorizeRequest, inputTokens: bigint, outputTokens: bigint) {
  const res = await t.client.authorize(req);
  await t.publishUsage(usageOf(req, res, inputTokens, outputTokens));
  await waitFor(
    () => t.query(`select status from reservations where id = $1`, [res.reservationId]),
    (rows) => rows[0]?.status === "settled",
  );
  return res;
}

function usageOf(req: AuthorizeRequest, res: AuthorizeResponse, inputTokens: bigint, outputTokens: bigint) {
  return UsageCompleted.fromPartial({
    requestId: req.requestId,
    reservationId: res.reservationId,
    accountId: req.accountId,
    keyId: req.keyId,
    modelId: req.modelId,
    provider: req.provider,
    hosterId: req.hosterId,
    inputTokens,
    outputTokens,
    latencyMs: 50n,
    success: true,
  });
}

/** The usage postings of one request, by ledger account ({} when it moved no money). */
async function usagePostings(requestId: string): Promise<Record<string, bigint>> {
  const rows = await t.query<{ ledger_account: string; amount_micros: string }>(
    `select p.ledger_account, p.amount_micros from journal_entries e join ledger_postings p on p.entry_id = e.id
     where e.kind = 'usage' and e.reference = $1`,
    [requestId],
  );
  return Object.fromEntries(rows.map((r) => [r.ledger_account, BigInt(r.amount_micros)]));
}

const balance = async (accountId: string) => (await t.client.getBalance({ accountId })).creditBalanceMicros;
const periodUsage = async (subscriptionId: string) =>
  t.query(`select period_index, used_tokens, overage_tokens from subscription_usage where subscription_id = $1`, [
    subscriptionId,
  ]);

describe("pricing from the terms snapshot", () => {
  it("payg: the plan's per-1M prices, split 20 / 80 between platform and hoster", async () => {
    const s = await subscribed({
      pricingModel: "payg",
      inputPricePer1mMicros: 2_500_000n,
      outputPricePer1mMicros: 9_999_999n,
    });
    const req = scoped(s, { inputTokens: 1_234n, requestedMaxOutputTokens: 1_000n });
    const res = await served(req, 1_234n, 567n);
    // Hold: ceil((1234 × 2.5 + 1000 × 9.999999) / 1M USD) = ceil(13084.999) micro-USD.
    expect(res.reservedMicros).toBe(13_085n);
    // Charge: ceil((1234 × 2,500,000 + 567 × 9,999,999) / 1M) = ceil(8754.999433) = 8755.
    expect(await usagePostings(req.requestId)).toEqual({
      [`customer:${s.accountId}`]: -8_755n,
      "platform:revenue": 1_751n, // floor(8755 × 20 / 100)
      [`hoster:${s.hosterId}`]: 7_004n,
    });
    expect(await balance(s.accountId)).toBe(5_000_000n - 8_755n);
    const [record] = await t.query(
      `select provider, cost_micros, platform_fee_micros, hoster_earned_micros from usage_records where request_id = $1`,
      [req.requestId],
    );
    expect(record).toEqual({
      provider: "hoster",
      cost_micros: "8755",
      platform_fee_micros: "1751",
      hoster_earned_micros: "7004",
    });
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1801", overage_tokens: "0" },
    ]);
  });

  it("ignores prices on the route: a scoped request is priced by its subscription only", async () => {
    const s = await subscribed({ pricingModel: "free" });
    const req = scoped(s, { inputPricePer1mMicros: 9_000_000n, outputPricePer1mMicros: 9_000_000n });
    const res = await served(req, 100n, 4_000n);
    expect(res.reservedMicros).toBe(0n);
    expect(await usagePostings(req.requestId)).toEqual({});
    expect(await balance(s.accountId)).toBe(5_000_000n);
  });

  it("free: nothing is held or charged, whatever the balance", async () => {
    const s = await subscribed({ pricingModel: "free" });
    await balance(s.accountId); // opens the wallet, which is then emptied (and restored below)
    await t.query(`update wallets set posted_micros = 0 where account_id = $1`, [s.accountId]);
    const req = scoped(s);
    const res = await served(req, 100n, 200n);
    expect(res).toMatchObject({ reservedMicros: 0n, maxOutputTokens: 4096n });
    const [record] = await t.query(`select cost_micros from usage_records where request_id = $1`, [req.requestId]);
    expect(record).toEqual({ cost_micros: "0" });
    await t.query(
      `update wallets w set posted_micros = (select coalesce(sum(amount_micros), 0) from ledger_postings
         where ledger_account = 'customer:' || w.account_id) where account_id = $1`,
      [s.accountId],
    );
  });

  it("subscription: free within the included tokens, then 429 included_tokens_exhausted until the next period", async () => {
    const s = await subscribed({
      pricingModel: "subscription",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
    });
    const afterFee = await balance(s.accountId);
    await served(scoped(s, { inputTokens: 400n, requestedMaxOutputTokens: 200n }), 400n, 200n);
    // 600 of 1,000 used: the next request is admitted, and its real tokens all count (1,100).
    const crossing = await served(scoped(s, { inputTokens: 300n, requestedMaxOutputTokens: 500n }), 300n, 200n);
    expect(crossing.reservedMicros).toBe(0n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1100", overage_tokens: "0" },
    ]);

    const err = await refusal(t.client.authorize(scoped(s)));
    expect(err).toMatchObject({ code: "included_tokens_exhausted", httpStatus: 429 });
    expect(err.message).toContain("1000 included tokens");
    const [row] = await t.query<{ period_end: Date }>(`select period_end from subscriptions where id = $1`, [
      s.subscriptionId,
    ]);
    expect(err.headers["retry-after"]).toBe(String(Math.ceil((row!.period_end.getTime() - now.getTime()) / 1000)));
    // Nothing was charged per request, and the refusal counted nowhere.
    expect(await balance(s.accountId)).toBe(afterFee);
    const [counter] = await t.query(`select requests from subscription_rate_counters where subscription_id = $1`, [
      s.subscriptionId,
    ]);
    expect(counter).toEqual({ requests: "2" });

    // A renewal moves the subscription to its next period: the allowance is whole again.
    await t.query(`update subscriptions set period_index = period_index + 1 where id = $1`, [s.subscriptionId]);
    await served(scoped(s), 50n, 50n);
    expect(await periodUsage(s.subscriptionId)).toEqual(
      expect.arrayContaining([
        { period_index: 1, used_tokens: "1100", overage_tokens: "0" },
        { period_index: 2, used_tokens: "100", overage_tokens: "0" },
      ]),
    );
  });

  it("subscription_overage: free within the allowance, then the overage price for the part beyond it only", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 3_333_333n,
    });
    const afterFee = await balance(s.accountId);

    // 500 of the allowance: nothing held, nothing charged.
    const first = scoped(s, { inputTokens: 300n, requestedMaxOutputTokens: 200n });
    expect((await served(first, 300n, 200n)).reservedMicros).toBe(0n);
    expect(await usagePostings(first.requestId)).toEqual({});

    // Worst case 700 with 500 left: 200 tokens held at the overage price, ceil(666.67) = 667.
    // It uses 650: 150 beyond the allowance, ceil(150 × 3.333333) = 500 micro-USD.
    const crossing = scoped(s, { inputTokens: 300n, requestedMaxOutputTokens: 400n });
    expect((await served(crossing, 300n, 350n)).reservedMicros).toBe(667n);
    expect(await usagePostings(crossing.requestId)).toEqual({
      [`customer:${s.accountId}`]: -500n,
      "platform:revenue": 100n,
      [`hoster:${s.hosterId}`]: 400n,
    });

    // Beyond the allowance every token, input and output alike: 200 × 3.333333 → 667.
    const beyond = scoped(s, { inputTokens: 100n, requestedMaxOutputTokens: 100n });
    expect((await served(beyond, 100n, 100n)).reservedMicros).toBe(667n);
    expect(await usagePostings(beyond.requestId)).toEqual({
      [`customer:${s.accountId}`]: -667n,
      "platform:revenue": 133n,
      [`hoster:${s.hosterId}`]: 534n,
    });

    expect(await balance(s.accountId)).toBe(afterFee - 500n - 667n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1350", overage_tokens: "350" },
    ]);
    expect(await ledgerInvariants(t)).toMatchObject({ unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("subscription_overage: in-flight requests claim the allowance; overage left by out-of-order settlement is paid next", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 2_000_000n, // 2 micro-USD a token
    });
    const customerLeg = async (requestId: string) => (await usagePostings(requestId))[`customer:${s.accountId}`] ?? 0n;
    const a = scoped(s, { inputTokens: 100n, requestedMaxOutputTokens: 700n });
    const b = scoped(s, { inputTokens: 100n, requestedMaxOutputTokens: 400n });
    const resA = await t.client.authorize(a);
    const resB = await t.client.authorize(b);
    expect(resA.reservedMicros).toBe(0n); // claims 800 of the 1,000
    expect(resB.reservedMicros).toBe(2n * 300n); // 200 left to claim: 300 tokens beyond

    // B finishes first and fits in what is used so far; A, which held nothing, then crosses the
    // line. The 300 tokens beyond are used but not charged yet (never more than A's hold).
    await t.publishUsage(usageOf(b, resB, 100n, 400n));
    await t.waitSettled();
    await t.publishUsage(usageOf(a, resA, 100n, 700n));
    await t.waitSettled();
    expect((await customerLeg(a.requestId)) + (await customerLeg(b.requestId))).toBe(0n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1300", overage_tokens: "0" },
    ]);

    // The next request's hold covers that overage, and its settlement pays it: the period's
    // overage is then exact, (1,320 - 1,000) × 2 micro-USD.
    const c = scoped(s, { inputTokens: 10n, requestedMaxOutputTokens: 10n });
    expect((await served(c, 10n, 10n)).reservedMicros).toBe(2n * (300n + 20n));
    expect(await customerLeg(c.requestId)).toBe(-640n);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1320", overage_tokens: "320" },
    ]);
  });

  it("subscription_overage: without max_tokens the output cap is what the allowance and the balance pay", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 4_999_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 1_000_000_000n, // $1000 per 1M: 1,000 micro-USD a token
    });
    // 1,000 micro-USD left pays 1 overage token: 1,000 free + 1 - 100 prompt = 901 output tokens.
    const res = await t.client.authorize(scoped(s, { inputTokens: 100n }));
    expect(res).toMatchObject({ maxOutputTokens: 901n, reservedMicros: 1_000n });
    const err = await refusal(t.client.authorize(scoped(s, { inputTokens: 100n })));
    expect(err.code).toBe("insufficient_credits");
  });

  it("counts several requests of one period settled in one batch in order, and a replay changes nothing", async () => {
    const s = await subscribed({
      pricingModel: "subscription_overage",
      monthlyPriceMicros: 1_000_000n,
      includedTokens: 1_000n,
      overagePricePer1mMicros: 1_000_000n,
    });
    const reqs = [0, 1, 2].map(() => scoped(s, { inputTokens: 100n, requestedMaxOutputTokens: 500n }));
    const events: UsageCompleted[] = [];
    for (const req of reqs) events.push(usageOf(req, await t.client.authorize(req), 100n, 300n));
    const settle = () => orm.em.fork().transactional((em) => settleUsageBatch(em, events, log, now));
    expect(await settle()).toEqual(["settled", "settled", "settled"]);
    expect(await settle()).toEqual(["duplicate", "duplicate", "duplicate"]);
    // 3 × 400 = 1,200 tokens: 200 beyond, 1 micro-USD each, all on the third.
    const costs = await t.query(
      `select cost_micros from usage_records where request_id = any($1) order by cost_micros`,
      [reqs.map((r) => r.requestId)],
    );
    expect(costs).toEqual([{ cost_micros: "0" }, { cost_micros: "0" }, { cost_micros: "200" }]);
    expect(await periodUsage(s.subscriptionId)).toEqual([
      { period_index: 1, used_tokens: "1200", overage_tokens: "200" },
    ]);
  });
});

describe("plan limits per subscriber", () => {
  it("rpm: refuses past the plan's requests per minute with headers; other subscribers are independent", async () => {
    const plan = planOf({ pricingModel: "free", rpmLimit: 2n });
    const [a, b] = [await subscriber(plan), await subscriber(plan)];
    const first = await t.client.authorize(scoped(a));
    expect(first.rateLimit).toMatchObject({ limitPerMinute: 2n, remainingThisMinute: 1n, resetSeconds: 30n });
    await t.client.authorize(scoped(a));
    const err = await refusal(t.client.authorize(scoped(a)));
    expect(err).toMatchObject({ code: "rate_limit_exceeded", httpStatus: 429 });
    expect(err.headers).toEqual({
      "retry-after": "30",
      "x-ratelimit-limit-requests": "2",
      "x-ratelimit-remaining-requests": "0",
      "x-ratelimit-reset-requests": "30s",
    });
    // The other subscriber of the same plan has its own minute.
    await t.client.authorize(scoped(b));
    await t.client.authorize(scoped(b));
    // Refused requests are not counted: the account tier saw 2 requests of a, not 3.
    const summary = await t.client.getUsageSummary({ accountId: a.accountId, tier: "free" });
    expect(summary.rateLimits?.requestsThisMinute).toBe(2n);

    const saved = now;
    now = new Date("2026-03-10T10:01:02.000Z");
    try {
      expect((await t.client.authorize(scoped(a))).rateLimit).toMatchObject({ remainingThisMinute: 1n });
    } finally {
      now = saved;
    }
  });

  it("tpm: counts prompt + output cap when admitted, refuses past it with token headers", async () => {
    const s = await subscribed({ pricingModel: "free", tpmLimit: 1_000n });
    await t.client.authorize(scoped(s, { inputTokens: 300n, requestedMaxOutputTokens: 300n })); // 600
    const err = await refusal(t.client.authorize(scoped(s, { inputTokens: 300n, requestedMaxOutputTokens: 200n })));
    expect(err).toMatchObject({ code: "rate_limit_exceeded", httpStatus: 429 });
    expect(err.headers).toEqual({
      "retry-after": "30",
      "x-ratelimit-limit-tokens": "1000",
      "x-ratelimit-remaining-tokens": "400",
      "x-ratelimit-reset-tokens": "30s",
    });
    // Without max_tokens the output cap shrinks to the minute's room: 400 - 100 prompt.
    const fit = await t.client.authorize(scoped(s, { inputTokens: 100n }));
    expect(fit.maxOutputTokens).toBe(300n);
    const none = await refusal(t.client.authorize(scoped(s, { inputTokens: 1n })));
    expect(none.headers["x-ratelimit-remaining-tokens"]).toBe("0");
  });

  it("n choices: the hold and tpm cover every choice's output; the cap stays per choice", async () => {
    const s = await subscribed({
      pricingModel: "payg",
      inputPricePer1mMicros: 1_000_000n,
      outputPricePer1mMicros: 2_000_000n,
      tpmLimit: 1_000n,
    });
    const res = await t.client.authorize(scoped(s, { inputTokens: 100n, requestedMaxOutputTokens: 200n, choices: 3n }));
    // (100 × 1 + 3 × 200 × 2) / 1M USD = 1300 micro-USD
    expect(res.reservedMicros).toBe(1_300n);
    expect(res.maxOutputTokens).toBe(200n);
    // tpm counted 100 + 600: a second such request (700 more) no longer fits in 1000.
    const err = await refusal(
      t.client.authorize(scoped(s, { inputTokens: 100n, requestedMaxOutputTokens: 200n, choices: 3n })),
    );
    expect(err).toMatchObject({ code: "rate_limit_exceeded" });
    expect(err.headers["x-ratelimit-remaining-tokens"]).toBe("300");
  });

  it("max_concurrent: slots are held until ReleaseSlot, settlement or expiry; subscribers are independent", async () => {
    const plan = planOf({ pricingModel: "free", maxConcurrent: 2n });
    const [a, b] = [await subscriber(plan), await subscriber(plan)];
    const one = await t.client.authorize(scoped(a));
    const two = await t.client.authorize(scoped(a));
    const err = await refusal(t.client.authorize(scoped(a)));
    expect(err).toMatchObject({ code: "concurrency_limit_exceeded", httpStatus: 429 });
    expect(err.headers["retry-after"]).toBe("1");
    await t.client.authorize(scoped(b)); // b's slots are its own

    // registry's ReleaseSlot (every exit path) frees one, before settlement.
    await t.client.releaseSlot({ reservationId: one.reservationId });
    await t.client.authorize(scoped(a));
    expect((await refusal(t.client.authorize(scoped(a)))).code).toBe("concurrency_limit_exceeded");

    // A reservation past its deadline holds no slot, even before the sweeper expires it.
    const saved = now;
    now = new Date(now.getTime() + (t.config.RESERVATION_TTL_SECONDS + 1) * 1000);
    try {
      await t.client.authorize(scoped(a));
      await t.client.authorize(scoped(a));
      expect((await refusal(t.client.authorize(scoped(a)))).code).toBe("concurrency_limit_exceeded");
      const [row] = await t.query(`select status from reservations where id = $1`, [two.reservationId]);
      expect(row).toEqual({ status: "held" });
    } finally {
      now = saved;
    }
  });

  it("max_tokens above the plan's cap is 400 max_tokens_exceeded; the output cap is the plan's", async () => {
    const s = await subscribed({ pricingModel: "free", maxOutputTokens: 256n });
    const err = await refusal(t.client.authorize(scoped(s, { requestedMaxOutputTokens: 257n })));
    expect(err).toMatchObject({ code: "max_tokens_exceeded", param: "max_tokens", httpStatus: 400 });
    expect(err.message).toContain("this plan allows at most 256");
    expect((await t.client.authorize(scoped(s))).maxOutputTokens).toBe(256n);
    expect((await t.client.authorize(scoped(s, { requestedMaxOutputTokens: 256n }))).maxOutputTokens).toBe(256n);
  });

  it("the context limit is the smaller of the plan's and the model's; a prompt over it is 400", async () => {
    const s = await subscribed({ pricingModel: "free", maxContextTokens: 1_000n, maxOutputTokens: 4096n });
    const err = await refusal(t.client.authorize(scoped(s, { inputTokens: 1_001n })));
    expect(err).toMatchObject({ code: "context_length_exceeded", param: "messages", httpStatus: 400 });
    expect(err.message).toContain("This plan's maximum context length is 1000 tokens");
    // Room in the context caps the output when max_tokens is not given.
    expect((await t.client.authorize(scoped(s, { inputTokens: 900n }))).maxOutputTokens).toBe(100n);
    // A model with a smaller window than the plan's limit: the model's applies.
    const small = await refusal(t.client.authorize(scoped(s, { inputTokens: 600n, contextWindow: 512n })));
    expect(small.message).toContain("This model's maximum context length is 512 tokens");
    // Refusals count nowhere.
    const [counter] = await t.query(`select requests from subscription_rate_counters where subscription_id = $1`, [
      s.subscriptionId,
    ]);
    expect(counter).toEqual({ requests: "1" });
  });

  it("the account tier's limits still apply to scoped keys", async () => {
    const s = await subscribed({ pricingModel: "free", rpmLimit: 1_000n, maxConcurrent: 1_000n });
    for (let i = 0; i < 60; i++) await t.client.authorize(scoped(s, { requestedMaxOutputTokens: 1n }));
    const err = await refusal(t.client.authorize(scoped(s, { requestedMaxOutputTokens: 1n })));
    expect(err.code).toBe("rate_limit_exceeded");
    expect(err.headers["x-ratelimit-limit-requests"]).toBe("60");
  });

  it("refuses a scoped request routed anywhere but the subscription's hoster", async () => {
    const s = await subscribed({ pricingModel: "free" });
    expect((await refusal(t.client.authorize(scoped(s, { hosterId: randomUUID() })))).code).toBe("forbidden");
    expect((await refusal(t.client.authorize(scoped(s, { provider: "local", hosterId: "" })))).code).toBe("forbidden");
  });
});
