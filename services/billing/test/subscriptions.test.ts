import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isWellFormedApiKey, newApiKey } from "@mkt/runtime/api-key-format";
import type { AppError } from "@mkt/runtime/errors";
import { parseSecretsKey, SecretBox } from "@mkt/runtime/secret-box";
import type { LeaseNeed } from "@mkt/proto/billing/v1/leases";
import { KeyRevoked } from "@mkt/proto/events/v1/events";
import type { TestAccounts } from "../../accounts/test/accounts-harness.ts";
import { ledgerInvariants, type TestBilling } from "./billing-harness.ts";
import type { RegistryDouble } from "./registry-double.ts";
import { startBillingWithPeers, type BillingWithPeers } from "./saga-peers.ts";
import { refusal } from "@mkt/testkit/refusal";

// The saga against a real accounts service (scoped keys, keys.revoked) and a registry double
// that serves plans. The clock is billing's own, so the 24 h window can be crossed.
let now = new Date("2026-01-31T12:00:00.000Z");
let accounts: TestAccounts;
let registry: RegistryDouble;
let t: TestBilling;
let peers: BillingWithPeers | undefined;
beforeAll(async () => {
  peers = await startBillingWithPeers(() => now);
  ({ accounts, registry, billing: t } = peers);
});
afterAll(() => peers?.close());

async function customer(): Promise<string> {
  const { account } = await accounts.signUp();
  return account!.accountId;
}

const balance = async (accountId: string) => (await t.client.getBalance({ accountId })).creditBalanceMicros;
const subscribe = (accountId: string, productId: string, idempotencyKey = "") =>
  t.client.createSubscription({ accountId, productId, idempotencyKey });

/** The subscription_fee postings of one subscription, by ledger account. */
/** A lease grant from a fresh edge for one request of `need` (an account's own by default). */
const grant = (accountId: string, need: Partial<LeaseNeed>) =>
  t.client.grantLease({
    edgeId: `edge_${randomUUID()}`,
    incarnation: 0n,
    bootId: "",
    sequence: 1n,
    accountId,
    tier: "free",
    minCreditMicros: 0n,
    request: { creditMicros: 0n, requests: 1n, tokens: 0n, subscriptionId: "", keyId: "", ...need },
  });

async function feePostings(subscriptionId: string): Promise<Record<string, bigint>> {
  const rows = await t.query<{ ledger_account: string; amount_micros: string }>(
    `select p.ledger_account, p.amount_micros from journal_entries e join ledger_postings p on p.entry_id = e.id
     where e.kind = 'subscription_fee' and e.reference like $1`,
    [`${subscriptionId}:%`],
  );
  return Object.fromEntries(rows.map((r) => [r.ledger_account, BigInt(r.amount_micros)]));
}

async function scopedKeyRow(subscriptionId: string) {
  const [row] = await accounts.query<{ id: string; revoked_at: Date | null }>(
    `select id, revoked_at from api_keys where subscription_id = $1`,
    [subscriptionId],
  );
  return row;
}

describe("CreateSubscription", () => {
  it("charges the monthly price to the micro-dollar: customer debit = platform fee + hoster share", async () => {
    const accountId = await customer();
    // 4.999999 USD: 20% is 0.9999998, so the platform's floor is 0.999999 and the hoster gets 4.000000.
    const plan = registry.addProduct({ name: "Pro", pricingModel: "subscription", monthlyPriceMicros: 4_999_999n });
    const before = await balance(accountId);

    const res = await subscribe(accountId, plan.productId);
    const sub = res.subscription!;
    expect(res.replayed).toBe(false);
    expect(isWellFormedApiKey(res.apiKey)).toBe(true);
    expect(sub).toMatchObject({
      accountId,
      productId: plan.productId,
      productName: "Pro",
      hosterId: plan.hosterId,
      hosterName: "Test Hoster",
      status: "active",
      periodStart: "2026-01-31T12:00:00.000Z",
      // Jan 31 + 1 calendar month, clamped to February's last day.
      periodEnd: "2026-02-28T12:00:00.000Z",
      cancelledAt: "",
    });
    expect(sub.terms).toMatchObject({ pricingModel: "subscription", monthlyPriceMicros: 4_999_999n, rpmLimit: 60n });

    expect(await balance(accountId)).toBe(before - 4_999_999n);
    expect(await feePostings(sub.subscriptionId)).toEqual({
      [`customer:${accountId}`]: -4_999_999n,
      "platform:revenue": 999_999n,
      [`hoster:${plan.hosterId}`]: 4_000_000n,
    });
    expect(await ledgerInvariants(t)).toMatchObject({ unbalancedEntries: 0, mismatchedWallets: 0 });

    // The key is the subscription's: accounts knows its scope.
    const { principal } = await accounts.client.authenticate({ edgeId: "", apiKey: res.apiKey });
    expect(principal?.scope).toEqual({
      subscriptionId: sub.subscriptionId,
      productId: plan.productId,
      hosterId: plan.hosterId,
    });
    // The listing shows it, never the key.
    const { subscriptions } = await t.client.listSubscriptions({ accountId });
    expect(subscriptions).toEqual([sub]);
    expect(JSON.stringify(subscriptions, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v))).not.toContain(
      res.apiKey,
    );
  });

  it("snapshots the terms: a later edit of the plan does not change the subscription", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 1_000_000n, rpmLimit: 10n });
    const { subscription } = await subscribe(accountId, plan.productId);
    registry.editProduct(plan.productId, { monthlyPriceMicros: 3_000_000n, rpmLimit: 99n });
    const { subscriptions } = await t.client.listSubscriptions({ accountId });
    expect(subscriptions[0]!.terms).toMatchObject({ monthlyPriceMicros: 1_000_000n, rpmLimit: 10n });
    expect(subscriptions[0]!.subscriptionId).toBe(subscription!.subscriptionId);
  });

  it("charges nothing for free and payg plans", async () => {
    const accountId = await customer();
    const before = await balance(accountId);
    const free = registry.addProduct({ pricingModel: "free" });
    const payg = registry.addProduct({
      pricingModel: "payg",
      inputPricePer1mMicros: 200_000n,
      outputPricePer1mMicros: 600_000n,
    });
    for (const plan of [free, payg]) {
      const res = await subscribe(accountId, plan.productId);
      expect(res.subscription!.status).toBe("active");
      expect(await feePostings(res.subscription!.subscriptionId)).toEqual({});
    }
    expect(await balance(accountId)).toBe(before);
  });

  it("402 when the spendable balance is short: nothing charged, the key revoked, the key reusable", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription_overage", monthlyPriceMicros: 6_000_000n });
    const revocations = accounts.nc.subscribe(accounts.names.keysRevoked, { max: 1 });

    const err = await refusal(subscribe(accountId, plan.productId, "idem-402"));
    expect(err.code).toBe("insufficient_credits");
    expect(err.message).toContain("$5.00");
    expect(err.message).toContain("$6.00");
    expect(await balance(accountId)).toBe(5_000_000n);
    expect((await t.client.listSubscriptions({ accountId })).subscriptions).toEqual([]);

    const [row] = await t.query<{ id: string; status: string; key_revoked_at: Date | null }>(
      `select id, status, key_revoked_at from subscriptions where account_id = $1`,
      [accountId],
    );
    expect(row).toMatchObject({ status: "failed" });
    expect(row!.key_revoked_at).not.toBeNull();
    expect(await feePostings(row!.id)).toEqual({});
    const key = await scopedKeyRow(row!.id);
    expect(key?.revoked_at).not.toBeNull();
    for await (const msg of revocations) expect(KeyRevoked.decode(msg.data)).toEqual({ keyId: key!.id, accountId });

    // A failed attempt does not hold its Idempotency-Key: after a top-up the same key succeeds.
    await t.client.addCredits({ accountId, amountMicros: 2_000_000n, idempotencyKey: "top-up" });
    const res = await subscribe(accountId, plan.productId, "idem-402");
    expect(res).toMatchObject({ replayed: false, subscription: { status: "active" } });
    expect(await balance(accountId)).toBe(1_000_000n);
  });

  it("counts credit held by leases against the price (spendable = posted - held)", async () => {
    const accountId = await customer();
    // An edge's lease holds 4.50 of the 5.00.
    await grant(accountId, { creditMicros: 4_500_000n });
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 1_000_000n });
    const err = await refusal(subscribe(accountId, plan.productId));
    expect(err.code).toBe("insufficient_credits");
    expect(err.message).toContain("$0.50");
  });

  it("replays the same answer, key included, for the same Idempotency-Key within 24 h", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 1_000_000n });
    const first = await subscribe(accountId, plan.productId, "idem-replay");
    const again = await subscribe(accountId, plan.productId, "idem-replay");
    expect(again).toEqual({ ...first, replayed: true });
    expect(await balance(accountId)).toBe(4_000_000n); // charged once

    // The same key for another plan is a client bug.
    const other = registry.addProduct({ pricingModel: "free" });
    expect((await refusal(subscribe(accountId, other.productId, "idem-replay"))).code).toBe("idempotency_conflict");

    // After the window the key is never returned again, and the janitor erases its sealed copy.
    const saved = now;
    try {
      now = new Date(saved.getTime() + 24 * 3600_000 + 1);
      const late = await subscribe(accountId, plan.productId, "idem-replay");
      expect(late).toMatchObject({ apiKey: "", replayed: true, subscription: first.subscription });
      await t.billing.tidySubscriptions();
      const [row] = await t.query(`select sealed_api_key from subscriptions where id = $1`, [
        first.subscription!.subscriptionId,
      ]);
      expect(row).toEqual({ sealed_api_key: null });
    } finally {
      now = saved;
    }
  });

  it("of concurrent subscriptions to one plan with different keys, exactly one succeeds; the rest are 409", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 1_000_000n });
    const results = await Promise.allSettled(
      Array.from({ length: 5 }, (_, i) => subscribe(accountId, plan.productId, `race-${i}`)),
    );
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost.map((r) => (r.reason as AppError).code)).toEqual(Array(4).fill("already_subscribed"));
    expect(await balance(accountId)).toBe(4_000_000n);
    // A later attempt, too.
    expect((await refusal(subscribe(accountId, plan.productId))).code).toBe("already_subscribed");
  });

  it("refuses unknown products (not_found) and archived plans (invalid_request), charging nothing", async () => {
    const accountId = await customer();
    expect(await refusal(subscribe(accountId, randomUUID()))).toMatchObject({ code: "not_found", param: "product_id" });
    expect(await refusal(subscribe(accountId, "not-a-uuid"))).toMatchObject({ code: "not_found" });
    const archived = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 1n }, "archived");
    expect(await refusal(subscribe(accountId, archived.productId))).toMatchObject({
      code: "invalid_request",
      param: "product_id",
    });
    expect(await balance(accountId)).toBe(5_000_000n);
    // No key was ever asked for.
    const rows = await t.query(`select key_requested_at from subscriptions where account_id = $1`, [accountId]);
    expect(rows).toEqual([{ key_requested_at: null }, { key_requested_at: null }]);
  });

  it("passes on registry being down, and the same Idempotency-Key works once it is back", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "free" });
    registry.setFailing(true);
    try {
      expect((await refusal(subscribe(accountId, plan.productId, "idem-down"))).code).toBe("service_unavailable");
    } finally {
      registry.setFailing(false);
    }
    expect((await subscribe(accountId, plan.productId, "idem-down")).subscription!.status).toBe("active");
  });
});

describe("CancelSubscription", () => {
  it("cancels the owner's subscription, revokes its key at once, and answers a repeat unchanged", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 2_000_000n });
    const created = await subscribe(accountId, plan.productId);
    const subscriptionId = created.subscription!.subscriptionId;

    // Another account cannot see or cancel it.
    const stranger = await customer();
    expect(await refusal(t.client.cancelSubscription({ accountId: stranger, subscriptionId }))).toMatchObject({
      code: "not_found",
    });
    expect(await refusal(t.client.cancelSubscription({ accountId, subscriptionId: "nope" }))).toMatchObject({
      code: "not_found",
    });

    const revocations = accounts.nc.subscribe(accounts.names.keysRevoked, { max: 1 });
    now = new Date(now.getTime() + 3600_000);
    const { subscription } = await t.client.cancelSubscription({ accountId, subscriptionId });
    expect(subscription).toMatchObject({ status: "cancelled", cancelledAt: now.toISOString() });
    // Revoked and announced before the answer.
    await expect(accounts.client.authenticate({ edgeId: "", apiKey: created.apiKey })).rejects.toMatchObject({
      code: "invalid_api_key",
    });
    for await (const msg of revocations) expect(KeyRevoked.decode(msg.data).accountId).toBe(accountId);

    now = new Date(now.getTime() + 3600_000);
    const again = await t.client.cancelSubscription({ accountId, subscriptionId });
    expect(again.subscription).toEqual(subscription);
    // No refund.
    expect(await balance(accountId)).toBe(3_000_000n);
    expect((await t.client.listSubscriptions({ accountId })).subscriptions).toEqual([subscription]);

    // A cancelled subscription frees the plan for a new one.
    expect((await subscribe(accountId, plan.productId)).subscription!.status).toBe("active");
  });

  it("makes lease grants refuse the cancelled subscription's key whatever a cache says", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "free" });
    const { subscription } = await subscribe(accountId, plan.productId);
    const subscriptionId = subscription!.subscriptionId;
    await grant(accountId, { subscriptionId, tokens: 100n });

    await t.client.cancelSubscription({ accountId, subscriptionId });
    expect(await refusal(grant(accountId, { subscriptionId, tokens: 100n }))).toMatchObject({
      code: "invalid_api_key",
    });
    // Someone else's subscription id is no key of this account either.
    expect(await refusal(grant(await customer(), { subscriptionId, tokens: 100n }))).toMatchObject({
      code: "invalid_api_key",
    });
  });
});

describe("the subscription janitor", () => {
  it("gives up an attempt left pending by a dead process and revokes its key, even one issued late", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "free" });
    // What a process that died between asking for the key and activating leaves behind.
    const box = new SecretBox(parseSecretsKey(t.config.SECRETS_KEY));
    const id = randomUUID();
    const secret = newApiKey();
    await t.query(
      `insert into subscriptions (id, account_id, idempotency_key, product_id, status, sealed_api_key,
         key_requested_at, created_at)
       values ($1, $2, 'key:dead', $3, 'pending', $4, $5, $5)`,
      [
        id,
        accountId,
        plan.productId,
        box.seal(secret, `subscription:${id}:api_key`),
        new Date(now.getTime() - 3600_000),
      ],
    );
    // The plan's slot is held while it is pending.
    expect((await refusal(subscribe(accountId, plan.productId))).code).toBe("already_subscribed");

    expect(await t.billing.tidySubscriptions()).toMatchObject({ abandoned: 1, revoked: 1 });
    const [row] = await t.query(`select status, failure_code from subscriptions where id = $1`, [id]);
    expect(row).toEqual({ status: "failed", failure_code: "abandoned" });
    // The key request never arrived; the revocation took its slot, so arriving late it stays dead.
    const late = await accounts.client.issueScopedKey({
      accountId,
      scope: { subscriptionId: id, productId: plan.productId, hosterId: plan.hosterId },
      apiKey: secret,
      name: "",
    });
    expect(late.key!.revokedAt).not.toBe("");
    await expect(accounts.client.authenticate({ edgeId: "", apiKey: secret })).rejects.toMatchObject({
      code: "invalid_api_key",
    });

    expect((await subscribe(accountId, plan.productId)).subscription!.status).toBe("active");
  });

  it("drops failed attempts a day later, once their key is revoked", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 9_000_000n });
    expect((await refusal(subscribe(accountId, plan.productId))).code).toBe("insufficient_credits");
    expect((await refusal(subscribe(accountId, randomUUID()))).code).toBe("not_found");
    const failed = () => t.query(`select id from subscriptions where account_id = $1`, [accountId]);
    expect(await failed()).toHaveLength(2);

    await t.billing.tidySubscriptions();
    expect(await failed()).toHaveLength(2); // kept for a day
    const saved = now;
    try {
      now = new Date(saved.getTime() + 24 * 3600_000 + 1);
      expect((await t.billing.tidySubscriptions()).purged).toBeGreaterThanOrEqual(2);
      expect(await failed()).toEqual([]);
    } finally {
      now = saved;
    }
  });

  it("resumes an unfinished attempt when its Idempotency-Key is retried", async () => {
    const accountId = await customer();
    const plan = registry.addProduct({ pricingModel: "subscription", monthlyPriceMicros: 1_000_000n });
    const box = new SecretBox(parseSecretsKey(t.config.SECRETS_KEY));
    const id = randomUUID();
    const secret = newApiKey();
    await t.query(
      `insert into subscriptions (id, account_id, idempotency_key, product_id, status, sealed_api_key, created_at)
       values ($1, $2, 'key:resume', $3, 'pending', $4, $5)`,
      [id, accountId, plan.productId, box.seal(secret, `subscription:${id}:api_key`), now],
    );
    const res = await subscribe(accountId, plan.productId, "resume");
    expect(res).toMatchObject({ apiKey: secret, subscription: { subscriptionId: id, status: "active" } });
    expect(await balance(accountId)).toBe(4_000_000n);
  });
});
