import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import {
  admitOnLease,
  ledgerInvariants,
  REQUEST_CHARGE_SQL,
  settlementOf,
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
/** The request's usage record once settled, its batch's rollup deltas folded (reports read them). */
const settledOnce = async (requestId: string) => {
  const [record] = await waitFor(
    () => usageRecords(requestId),
    (rows) => rows.length > 0,
  );
  await t.billing.foldRollups();
  return record!;
};

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
      totalCachedInputTokens: 0n,
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

  describe("cached input tokens", () => {
    // A 1,000-token prompt and 100 output tokens at $3 / $15 per 1M, cached input at $0.30.
    const prices = {
      provider: "hoster",
      hosterId: "hoster-cache",
      inputPricePer1mMicros: 3_000_000n,
      outputPricePer1mMicros: 15_000_000n,
      worstCaseMicros: 4_500n,
    };

    it("charges them at the event's cached price, splits that 80/20 and keeps them on the record", async () => {
      const { req, event } = await admitted({ ...prices, cachedInputPricePer1mMicros: 300_000n });
      await t.publishUsage(
        event({ inputTokens: 1000n, outputTokens: 100n, cachedInputTokens: 800n, reasoningTokens: 40n }),
      );
      const record = await settledOnce(req.requestId);
      // ceil(200 × 3 + 800 × 0.30 + 100 × 15) = 600 + 240 + 1500 = 2340 micro-USD.
      expect(record).toMatchObject({
        cost_micros: "2340",
        platform_fee_micros: "468",
        hoster_earned_micros: "1872",
        cached_input_tokens: "800",
        reasoning_tokens: "40",
      });
      const summary = await t.client.getUsageSummary({ accountId: req.accountId, tier: "free" });
      expect(summary.usage30d).toMatchObject({ totalInputTokens: 1000n, totalCachedInputTokens: 800n });
    });

    it("prices them at the input price when the event names no cached price (an edge from before)", async () => {
      const { req, event } = await admitted(prices);
      await t.publishUsage(event({ inputTokens: 1000n, outputTokens: 100n, cachedInputTokens: 800n }));
      // ceil(1000 × 3 + 100 × 15) = 4500.
      expect(await settledOnce(req.requestId)).toMatchObject({ cost_micros: "4500", cached_input_tokens: "800" });
    });

    it("charges an explicit cached price of 0 as 0", async () => {
      const { req, event } = await admitted({ ...prices, cachedInputPricePer1mMicros: 0n });
      await t.publishUsage(event({ inputTokens: 1000n, outputTokens: 100n, cachedInputTokens: 800n }));
      // ceil(200 × 3 + 100 × 15) = 2100.
      expect(await settledOnce(req.requestId)).toMatchObject({ cost_micros: "2100" });
    });

    it("clamps an event's cached count to [0, input] and its reasoning count to [0, output]", async () => {
      const over = await admitted({ ...prices, cachedInputPricePer1mMicros: 300_000n });
      await t.publishUsage(
        over.event({ inputTokens: 1000n, outputTokens: 100n, cachedInputTokens: 5_000n, reasoningTokens: 900n }),
      );
      // All 1,000 input tokens cached at most: ceil(1000 × 0.30 + 100 × 15) = 1800.
      expect(await settledOnce(over.req.requestId)).toMatchObject({
        cost_micros: "1800",
        cached_input_tokens: "1000",
        reasoning_tokens: "100",
      });
      const negative = await admitted({ ...prices, cachedInputPricePer1mMicros: 300_000n });
      await t.publishUsage(
        negative.event({ inputTokens: 1000n, outputTokens: 100n, cachedInputTokens: -5n, reasoningTokens: -1n }),
      );
      expect(await settledOnce(negative.req.requestId)).toMatchObject({
        cost_micros: "4500",
        cached_input_tokens: "0",
        reasoning_tokens: "0",
      });
      await ledgerInvariants(t);
    });
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
    // The split is the record's (the proof per request); its batch's entry moves the sums.
    expect(record).toMatchObject({ cost_micros: "2000", platform_fee_micros: "400", hoster_earned_micros: "1600" });
    const { legs, recordsInEntry } = await settlementOf(t, req.requestId);
    expect(recordsInEntry).toBe(1); // settled alone: the legs are this request's
    expect(legs).toEqual({
      [`customer:${req.accountId}`]: "-2000",
      "platform:revenue": "400",
      "hoster:hoster-1": "1600",
    });
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
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
    // Charged once: one record, in one batch entry whose customer leg is the sum of its records.
    const [charged] = await t.query<{ v: string }>(REQUEST_CHARGE_SQL, [req.requestId]);
    expect(charged?.v).toBe("275");
    expect(
      await t.query(`select 1 from ledger_postings where ledger_account = $1 and amount_micros < 0`, [
        `customer:${req.accountId}`,
      ]),
    ).toHaveLength(1);
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
    // One journal entry per batch: the records name the entry that settled them.
    const batches = await t.query<{ n: string }>(
      `select count(*)::text as n from usage_records r join journal_entries e on e.id = r.entry_id
       where e.kind = 'usage_batch' and r.request_id = any($1) group by e.id order by min(e.created_at)`,
      [all.map(({ req }) => req.requestId)],
    );
    expect(batches.map((b) => b.n)).toEqual(["1", "5"]);
  });

  it("records an event with no lease id at no cost (no edge sends one)", async () => {
    const accountId = randomUUID();
    const requestId = newRequestId();
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

  it("dead-letters an undecodable message and an event without a request id, and keeps settling what follows", async () => {
    // Field 1 with wire type 7 does not exist in protobuf: decoding must fail.
    const poison = new Uint8Array([0x0f, 0xff, 0xff]);
    await t.publishRaw(poison, `poison-${randomUUID()}`);
    const nameless = randomUUID();
    await t.publishUsage({ requestId: "", accountId: nameless }, `empty-${randomUUID()}`);
    const { req, event } = await admitted();
    await t.publishUsage(event({ inputTokens: 100n, outputTokens: 1n, latencyMs: 5n }));
    await settledOnce(req.requestId);
    await t.waitSettled(); // nothing left pending or unacknowledged: both were dead-lettered, then acked
    const namelessBytes = UsageCompleted.encode(
      UsageCompleted.fromPartial({ requestId: "", accountId: nameless }),
    ).finish();
    const letters = await t.query(`select reason from usage_dead_letters where data = $1 or data = $2`, [
      Buffer.from(poison),
      Buffer.from(namelessBytes),
    ]);
    expect(letters.map((row) => row.reason).sort()).toEqual([
      "request_id is empty",
      expect.stringMatching(/^undecodable usage event/),
    ]);
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
