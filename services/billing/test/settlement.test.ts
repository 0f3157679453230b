import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import {
  admitOnLease,
  ledgerInvariants,
  startTestBilling,
  waitFor,
  type LeaseUsage,
  type TestBilling,
} from "./billing-harness.ts";

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling({
    SETTLE_BATCH_SIZE: "50",
    // Long enough that the events published right after a batch all wait for the next one.
    SETTLE_BATCH_WINDOW_MS: "300",
    TIERS: JSON.stringify({ free: { limit_per_minute: 1000, limit_per_day: 10000 } }),
  });
});
afterAll(async () => {
  await t?.close();
});

/**
 * Admits a request on a lease with a worst case of 350 micro-USD (a 100-token prompt and 200
 * output tokens at $0.50 / $1.50 per 1M) and returns its usage.completed (tokens to be filled in).
 */
async function admitted(overrides: Partial<LeaseUsage> = {}) {
  const admittedEvent = await admitOnLease(t, {
    accountId: randomUUID(),
    worstCaseMicros: 350n,
    worstCaseTokens: 300n,
    startedAt: new Date().toISOString(),
    ...overrides,
  });
  const req = { requestId: admittedEvent.requestId, accountId: admittedEvent.accountId };
  const event = (usage: Partial<UsageCompleted>): Partial<UsageCompleted> => ({ ...admittedEvent, ...usage });
  return { req, event };
}

const usageRecords = (requestId: string) =>
  t.query<Record<string, unknown>>(`select * from usage_records where request_id = $1`, [requestId]);
const settledOnce = async (requestId: string) =>
  (
    await waitFor(
      () => usageRecords(requestId),
      (rows) => rows.length > 0,
    )
  )[0]!;

describe("usage settlement", () => {
  it("charges the exact cost, releases the hold and counts the request in the usage summary", async () => {
    const { req, event } = await admitted();
    await t.publishUsage(event({ inputTokens: 100n, outputTokens: 150n, latencyMs: 1234n }));
    const record = await settledOnce(req.requestId);
    // ceil((100 × 0.50 + 150 × 1.50) / 1M USD) = 275 micro-USD
    expect(record).toMatchObject({
      cost_micros: "275",
      platform_fee_micros: "275",
      hoster_earned_micros: "0",
      success: true,
    });

    const summary = await t.client.getUsageSummary({ accountId: req.accountId, tier: "free" });
    expect(summary.creditBalanceMicros).toBe(5_000_000n - 275n);
    expect(summary.usage30d).toEqual({
      totalRequests: 1n,
      totalInputTokens: 100n,
      totalOutputTokens: 150n,
      totalCostMicros: 275n,
      avgLatencyMs: 1234,
    });
    const [wallet] = await t.query(`select posted_micros, held_micros from wallets where account_id = $1`, [
      req.accountId,
    ]);
    expect(wallet).toEqual({ posted_micros: "4999725", held_micros: "0" });
  });

  it("counts failed requests in the latency average", async () => {
    const accountId = randomUUID();
    const ok = await admitted({ accountId });
    const failed = await admitted({ accountId });
    await t.publishUsage(ok.event({ inputTokens: 100n, outputTokens: 10n, latencyMs: 1000n }));
    await t.publishUsage(
      failed.event({
        inputTokens: 100n,
        outputTokens: 0n,
        latencyMs: 500n,
        success: false,
        errorCode: "upstream_error",
      }),
    );
    await settledOnce(ok.req.requestId);
    const record = await settledOnce(failed.req.requestId);
    // It gave no completion token and failed: nothing charged for nothing, its prompt recorded.
    expect(record).toMatchObject({
      success: false,
      error_code: "upstream_error",
      input_tokens: "100",
      cost_micros: "0",
    });
    const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
    expect(summary.usage30d).toMatchObject({ totalRequests: 2n, avgLatencyMs: 750 });
  });

  it("splits a hoster-served cost 80/20 in the ledger", async () => {
    const { req, event } = await admitted({
      provider: "hoster",
      hosterId: "hoster-1",
      inputPricePer1mMicros: 1_000_000n,
      outputPricePer1mMicros: 2_000_000n,
      worstCaseMicros: 3_000n, // a 1,000-token prompt and 1,000 output tokens
    });
    await t.publishUsage(event({ inputTokens: 1000n, outputTokens: 500n, latencyMs: 10n }));
    const record = await settledOnce(req.requestId);
    expect(record).toMatchObject({ cost_micros: "2000", platform_fee_micros: "400", hoster_earned_micros: "1600" });
    const postings = await t.query(
      `select p.ledger_account, p.amount_micros from ledger_postings p join journal_entries e on e.id = p.entry_id
       where e.kind = 'usage' and e.reference = $1 order by p.amount_micros`,
      [req.requestId],
    );
    expect(postings).toEqual([
      { ledger_account: `customer:${req.accountId}`, amount_micros: "-2000" },
      { ledger_account: "platform:revenue", amount_micros: "400" },
      { ledger_account: "hoster:hoster-1", amount_micros: "1600" },
    ]);
  });

  it("never charges more than the admitted worst case", async () => {
    const { req, event } = await admitted();
    await t.publishUsage(event({ inputTokens: 100n, outputTokens: 100_000n, latencyMs: 10n }));
    const record = await settledOnce(req.requestId);
    expect(record.cost_micros).toBe("350");
    expect((await t.client.getBalance({ accountId: req.accountId })).creditBalanceMicros).toBe(5_000_000n - 350n);
  });

  it("settles a replayed event once, even under different Nats-Msg-Ids", async () => {
    const { req, event } = await admitted();
    const usage = event({ inputTokens: 100n, outputTokens: 150n, latencyMs: 100n });
    for (let i = 0; i < 3; i++) await t.publishUsage(usage); // same msgID: JetStream drops the copies
    for (let i = 0; i < 3; i++) await t.publishUsage(usage, `${req.requestId}-replay-${i}`); // reach billing
    await settledOnce(req.requestId);
    await t.waitSettled();

    expect(await usageRecords(req.requestId)).toHaveLength(1);
    const charges = await t.query(`select id from journal_entries where kind = 'usage' and reference = $1`, [
      req.requestId,
    ]);
    expect(charges).toHaveLength(1);
    const summary = await t.client.getUsageSummary({ accountId: req.accountId, tier: "free" });
    expect(summary.creditBalanceMicros).toBe(5_000_000n - 275n);
    expect(summary.usage30d).toMatchObject({ totalRequests: 1n, totalCostMicros: 275n, totalOutputTokens: 150n });
  });

  it("settles a backlog of events in batches, each charged once", async () => {
    const accountId = randomUUID();
    const requests = await Promise.all(Array.from({ length: 120 }, () => admitted({ accountId })));
    await Promise.all(
      requests.map(({ event }) => t.publishUsage(event({ inputTokens: 100n, outputTokens: 150n, latencyMs: 10n }))),
    );
    await t.waitSettled();
    const [count] = await t.query(`select count(*)::text as n from usage_records where account_id = $1`, [accountId]);
    expect(count?.n).toBe("120");
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n - 120n * 275n);
  });

  it("settles a lone event at once and the events arriving within the window after it together", async () => {
    const accountId = randomUUID();
    const all = await Promise.all(Array.from({ length: 6 }, () => admitted({ accountId })));
    const [first, ...rest] = all;
    const usage = { inputTokens: 100n, outputTokens: 150n, latencyMs: 10n };
    // Past the window of the batches before this test: the settler is waiting for an event.
    await t.waitSettled();
    await new Promise((resolve) => setTimeout(resolve, 300));
    const published = performance.now();
    await t.publishUsage(first!.event(usage));
    await settledOnce(first!.req.requestId);
    // The window holds the next pull, not the first event of a quiet consumer.
    expect(performance.now() - published).toBeLessThan(300);
    // Spaced out, as a trickle of requests would be: without the window each would settle alone.
    for (const { event } of rest) {
      await t.publishUsage(event(usage));
      await new Promise((resolve) => setTimeout(resolve, 30));
    }
    await t.waitSettled();
    // One transaction per batch: its entries share the transaction's timestamp.
    const batches = await t.query<{ created_at: Date; n: string }>(
      `select created_at, count(*)::text as n from journal_entries
       where kind = 'usage' and reference = any($1) group by created_at order by created_at`,
      [all.map(({ req }) => req.requestId)],
    );
    expect(batches.map((b) => b.n)).toEqual(["1", "5"]);
  });

  it("records an event with no lease id at no cost (no edge sends one)", async () => {
    const accountId = randomUUID();
    const requestId = `req_${randomUUID()}`;
    await t.publishUsage({
      requestId,
      accountId,
      modelId: "demo-small",
      provider: "local",
      inputTokens: 10n,
      outputTokens: 5n,
      success: true,
      latencyMs: 20n,
    });
    const record = await settledOnce(requestId);
    expect(record).toMatchObject({ cost_micros: "0", input_tokens: "10" });
  });

  it("terminates an undecodable message and keeps settling what follows", async () => {
    // Field 1 with wire type 7 does not exist in protobuf: decoding must fail.
    await t.publishRaw(new Uint8Array([0x0f, 0xff, 0xff]), `poison-${randomUUID()}`);
    await t.publishUsage({ requestId: "", accountId: randomUUID() }, `empty-${randomUUID()}`);
    const { req, event } = await admitted();
    await t.publishUsage(event({ inputTokens: 100n, outputTokens: 1n, latencyMs: 5n }));
    await settledOnce(req.requestId);
    await t.waitSettled(); // nothing left pending or unacknowledged: the poison was terminated
  });

  it("keeps the ledger balanced and wallets equal to their postings", async () => {
    await t.waitSettled();
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
    const [held] = await t.query<{ bad: string }>(
      `select count(*)::text as bad from wallets w where held_micros <> (select coalesce(sum(held_micros), 0)
         from leases l where l.account_id = w.account_id)`,
    );
    expect(held?.bad).toBe("0");
  });
});
