import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Product } from "@mkt/proto/registry/v1/registry";
import type { TestAccounts } from "../../accounts/test/accounts-harness.ts";
import { maskEmail } from "../src/earnings/masked-email.ts";
import { settleOnLease, type TestBilling } from "./billing-harness.ts";
import type { RegistryDouble } from "./registry-double.ts";
import { startBillingWithPeers, type BillingWithPeers } from "./saga-peers.ts";
import { refusal } from "@mkt/testkit/refusal";

// The hoster's reports against real accounts (e-mails) and a registry double (plans), on
// billing's clock: fees are posted at subscription and renewal, per-request shares by settling
// real usage events. Every figure is checked against the hoster's ledger postings.
let now = new Date("2030-01-10T12:00:00.000Z");
let accounts: TestAccounts;
let registry: RegistryDouble;
let t: TestBilling;
let peers: BillingWithPeers | undefined;
beforeAll(async () => {
  peers = await startBillingWithPeers(() => now);
  ({ accounts, registry, billing: t } = peers);
});
afterAll(() => peers?.close());

const at = (iso: string) => (now = new Date(iso));

async function customer(topUpMicros = 0n): Promise<{ accountId: string; email: string }> {
  const { account } = await accounts.signUp();
  if (topUpMicros > 0n) {
    await t.client.addCredits({ accountId: account!.accountId, amountMicros: topUpMicros, idempotencyKey: "seed" });
  }
  return { accountId: account!.accountId, email: account!.email };
}

async function subscribe(accountId: string, productId: string) {
  const { subscription } = await t.client.createSubscription({ accountId, productId, idempotencyKey: "" });
  const [row] = await t.query<{ key_id: string }>(`select key_id from subscriptions where id = $1`, [
    subscription!.subscriptionId,
  ]);
  return { ...subscription!, keyId: row!.key_id };
}

/** One request on the subscription's scoped key, settled through the real consumer. */
async function request(
  sub: { accountId: string; subscriptionId: string; keyId: string },
  plan: Product,
  modelId: string,
  tokens: { input: bigint; output: bigint },
) {
  await settleOnLease(t, {
    accountId: sub.accountId,
    subscriptionId: sub.subscriptionId,
    keyId: sub.keyId,
    provider: "hoster",
    hosterId: plan.hosterId,
    modelId,
    // Registry prices hoster routes at 0; the subscription's terms price the request, well
    // within this worst case.
    inputPricePer1mMicros: 0n,
    outputPricePer1mMicros: 0n,
    worstCaseMicros: 100_000n,
    inputTokens: tokens.input,
    outputTokens: tokens.output,
    latencyMs: 100n,
  });
}

/**
 * What the ledger says the hoster was paid, by kind (the auditor's figure): usage is the
 * hoster's legs of settled batches' entries (and of per-request entries before them).
 */
async function posted(hosterId: string, kind: "usage" | "subscription_fee", from?: string): Promise<bigint> {
  const kinds = kind === "usage" ? ["usage", "usage_batch"] : [kind];
  const [row] = await t.query<{ v: string | null }>(
    `select sum(p.amount_micros)::text as v from ledger_postings p join journal_entries e on e.id = p.entry_id
     where p.ledger_account = $1 and e.kind = any($2) and ($3::timestamptz is null or p.created_at >= $3::timestamptz)`,
    [`hoster:${hosterId}`, kinds, from ?? null],
  );
  return BigInt(row?.v ?? "0");
}

describe("hoster earnings and subscribers", () => {
  const hosterId = randomUUID();
  let monthly: Product;
  let payg: Product;
  let idle: Product;
  let first: Awaited<ReturnType<typeof subscribe>> & { email: string };
  let second: Awaited<ReturnType<typeof subscribe>> & { email: string };

  beforeAll(async () => {
    // 4.999999 USD a month: the hoster's posted share is 4.000000 each period.
    monthly = registry.addProduct(
      { name: "Monthly", pricingModel: "subscription", monthlyPriceMicros: 4_999_999n, includedTokens: 1_000_000n },
      "active",
      hosterId,
    );
    payg = registry.addProduct(
      {
        name: "Pay as you go",
        pricingModel: "payg",
        inputPricePer1mMicros: 1_000_000n,
        outputPricePer1mMicros: 3_000_000n,
      },
      "active",
      hosterId,
    );
    idle = registry.addProduct({ name: "Nobody's", pricingModel: "free" }, "active", hosterId);

    at("2030-01-10T12:00:00.000Z");
    const c1 = await customer(20_000_000n);
    first = { ...(await subscribe(c1.accountId, monthly.productId)), email: c1.email };
    at("2030-02-10T12:00:00.000Z");
    await t.billing.renewSubscriptions(now);

    at("2030-02-20T09:00:00.000Z");
    const c2 = await customer();
    second = { ...(await subscribe(c2.accountId, payg.productId)), email: c2.email };
    // cost = ceil(1234 × 1 + 567 × 3) = 2935 µUSD: platform floor(587) = 587, hoster 2348.
    await request(second, payg, "llama-a.gguf", { input: 1234n, output: 567n });
    // cost = ceil(10 × 1 + 1 × 3) = 13: platform 2, hoster 11.
    await request(second, payg, "llama-b.gguf", { input: 10n, output: 1n });
    await request(second, payg, "llama-a.gguf", { input: 1n, output: 0n }); // 1: platform 0, hoster 1
    await t.waitSettled();
  });

  it("earnings are the hoster's posted shares: fees in by_plan, per-request shares by plan and day", async () => {
    const usage = await posted(hosterId, "usage");
    expect(usage).toBe(2348n + 11n + 1n);

    const report = await t.client.getHosterEarnings({ hosterId, days: 30 });
    // The window (Jan 21 → today) holds the February renewal, not the January subscription.
    expect(report.byPlan).toEqual([
      {
        productId: monthly.productId,
        productName: "Monthly",
        pricingModel: "subscription",
        subscribers: 1n,
        subscriptionFeesMicros: 4_000_000n,
        usageEarnedMicros: 0n,
        earnedMicros: 4_000_000n,
      },
      {
        productId: payg.productId,
        productName: "Pay as you go",
        pricingModel: "payg",
        subscribers: 1n,
        subscriptionFeesMicros: 0n,
        usageEarnedMicros: usage,
        earnedMicros: usage,
      },
      {
        productId: idle.productId,
        productName: "Nobody's",
        pricingModel: "free",
        subscribers: 0n,
        subscriptionFeesMicros: 0n,
        usageEarnedMicros: 0n,
        earnedMicros: 0n,
      },
    ]);
    expect(report.totalEarnedMicros).toBe(4_000_000n + usage);
    expect(report.totalEarnedMicros).toBe((await posted(hosterId, "subscription_fee", "2030-01-21T00:00:00Z")) + usage);
    expect(report.payableMicros).toBe((await posted(hosterId, "subscription_fee")) + usage);
    expect(report.payableMicros).toBe(8_000_000n + usage);
    expect(report.payoutThresholdMicros).toBe(10_000_000n);
    expect(report.payoutEligible).toBe(false);

    expect(report.daily).toHaveLength(31);
    expect(report.daily[0]!.date).toBe("2030-01-21");
    expect(report.daily.at(-1)!.date).toBe("2030-02-20");
    const byDay = Object.fromEntries(report.daily.map((d) => [d.date, d.earnedMicros]));
    expect(byDay["2030-02-10"]).toBe(4_000_000n);
    expect(byDay["2030-02-20"]).toBe(usage);
    expect(report.daily.reduce((sum, d) => sum + d.earnedMicros, 0n)).toBe(report.totalEarnedMicros);

    // A year back reaches the January fee too.
    const year = await t.client.getHosterEarnings({ hosterId, days: 365 });
    expect(year.totalEarnedMicros).toBe(8_000_000n + usage);
  });

  it("becomes payable past the 10 USD threshold", async () => {
    at("2030-03-10T12:00:00.000Z");
    await t.billing.renewSubscriptions(now);
    const report = await t.client.getHosterEarnings({ hosterId, days: 30 });
    expect(report.payableMicros).toBe(12_000_000n + (await posted(hosterId, "usage")));
    expect(report.payoutEligible).toBe(true);
    at("2030-02-20T09:00:00.000Z");
  });

  it("by model: requests, tokens, what customers paid and the hoster's shares, fees left out", async () => {
    const { byModel } = await t.client.getHosterEarningsByModel({ hosterId, days: 30 });
    expect(byModel).toEqual([
      {
        modelId: "llama-a.gguf",
        requests: 2n,
        inputTokens: 1235n,
        outputTokens: 567n,
        grossMicros: 2936n,
        earnedMicros: 2349n,
      },
      {
        modelId: "llama-b.gguf",
        requests: 1n,
        inputTokens: 10n,
        outputTokens: 1n,
        grossMicros: 13n,
        earnedMicros: 11n,
      },
    ]);
  });

  it("lists the hoster's plans and subscribers with usage and masked e-mails only", async () => {
    const res = await t.client.listHosterSubscribers({ hosterId });
    const usage = await posted(hosterId, "usage");
    expect(res.plans).toEqual([
      { productId: monthly.productId, productName: "Monthly", subscribers: 1n, earnedMicros: 12_000_000n },
      { productId: payg.productId, productName: "Pay as you go", subscribers: 1n, earnedMicros: usage },
      { productId: idle.productId, productName: "Nobody's", subscribers: 0n, earnedMicros: 0n },
    ]);
    expect(res.subscribers).toEqual([
      {
        subscriptionId: second.subscriptionId,
        productId: payg.productId,
        productName: "Pay as you go",
        status: "active",
        emailMasked: maskEmail(second.email),
        periodEnd: "2030-03-20T09:00:00.000Z",
        requests: 3n,
        totalTokens: 1234n + 567n + 11n + 1n,
        createdAt: "2030-02-20T09:00:00.000Z",
      },
      {
        subscriptionId: first.subscriptionId,
        productId: monthly.productId,
        productName: "Monthly",
        status: "active",
        emailMasked: maskEmail(first.email),
        periodEnd: "2030-04-10T12:00:00.000Z",
        requests: 0n,
        totalTokens: 0n,
        createdAt: "2030-01-10T12:00:00.000Z",
      },
    ]);
    expect(res.subscribers[0]!.emailMasked).toMatch(/^u\*\*\*@example\.com$/);
    const text = JSON.stringify(res, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v));
    expect(text).not.toContain(first.email);
    expect(text).not.toContain(second.email);
  });

  it("shows another hoster nothing of this one's", async () => {
    const other = registry.addProduct({ name: "Other", pricingModel: "free" });
    const earnings = await t.client.getHosterEarnings({ hosterId: other.hosterId, days: 365 });
    expect(earnings).toMatchObject({ totalEarnedMicros: 0n, payableMicros: 0n, payoutEligible: false });
    expect(earnings.byPlan.map((p) => p.productId)).toEqual([other.productId]);
    expect((await t.client.getHosterEarningsByModel({ hosterId: other.hosterId, days: 365 })).byModel).toEqual([]);
    expect(await t.client.listHosterSubscribers({ hosterId: other.hosterId })).toEqual({
      plans: [{ productId: other.productId, productName: "Other", subscribers: 0n, earnedMicros: 0n }],
      subscribers: [],
    });
  });

  it("refuses days outside 1..365", async () => {
    for (const days of [0, 366, -1]) {
      const err = await refusal(t.client.getHosterEarnings({ hosterId, days }));
      expect(err).toMatchObject({ code: "invalid_request", param: "days" });
      expect(await refusal(t.client.getHosterEarningsByModel({ hosterId, days }))).toMatchObject({ param: "days" });
    }
  });
});

describe("the hoster rollup", () => {
  it("is folded from each settled batch's deltas, each request once however often its event comes", async () => {
    const hosterId = randomUUID();
    const { accountId } = await customer(1_000_000n);
    const usage = {
      accountId,
      provider: "hoster",
      hosterId,
      keyId: "key_rollup",
      modelId: "model-r",
      inputTokens: 1000n,
      outputTokens: 500n,
    };
    const rollup = async () =>
      (
        await t.query<{ requests: string; cost: string; earned: string }>(
          `select requests::text, cost_micros::text as cost, hoster_earned_micros::text as earned
           from hoster_usage_daily where hoster_id = $1`,
          [hosterId],
        )
      ).map((r) => [Number(r.requests), Number(r.cost), Number(r.earned)]);
    const first = await settleOnLease(t, usage);
    await settleOnLease(t, { ...usage, success: false, outputTokens: 0n });
    // 1,250 = 1000 × 0.50 + 500 × 1.50 per 1M, of which the hoster earns 80%; a failed request
    // counts and costs nothing.
    expect(await rollup()).toEqual([[2, 1250, 1000]]);
    // The first event again, under another message id (a replay): recorded already, it adds nothing.
    await t.publishUsage(first, `replay-${first.requestId}`);
    await t.waitSettled();
    expect(await rollup()).toEqual([[2, 1250, 1000]]);
  });
});

describe("maskEmail", () => {
  it("keeps the first character and the domain", () => {
    expect(maskEmail("jane.doe@example.com")).toBe("j***@example.com");
    expect(maskEmail("j@example.com")).toBe("j***@example.com");
    expect(maskEmail("émile@exemple.fr")).toBe("é***@exemple.fr");
    expect(maskEmail("no-at-sign")).toBe("***");
  });
});
