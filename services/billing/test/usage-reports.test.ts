import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { costMicros, splitRevenue } from "@mkt/runtime/money";
import { createClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import {
  BillingServiceClient,
  ExportUsageRequest,
  type ExportUsageResponse,
  type UsageBucket,
} from "@mkt/proto/billing/v1/billing";
import { settleOnLease, startTestBilling, type LeaseUsage, type TestBilling } from "./billing-harness.ts";

// A Wednesday; the week of the report's current bucket starts on Monday 2026-11-23.
const NOW = new Date("2026-11-25T10:30:00Z");
let clock = NOW;
let t: TestBilling;
let streams: BillingServiceClient;
const account = randomUUID();
const other = randomUUID();

const HOSTER = { provider: "hoster", hosterId: "hst_1", modelId: "llama-3-8b.gguf" } as const;
const CLOUD = { provider: "cloud", modelId: "gpt-cloud" } as const;
const LOCAL = { provider: "local", modelId: "demo-small" } as const;
const PRICES = { input: 500_000n, output: 1_500_000n };

interface Settled {
  at: string;
  route: Partial<LeaseUsage>;
  input: bigint;
  output: bigint;
  latency: bigint;
  success?: boolean;
  accountId?: string;
}

/** The usage the tests settle, through the real GrantLease → usage.completed → settlement path. */
const USAGE: Settled[] = [
  { at: "2026-11-25T10:05:00Z", route: LOCAL, input: 100n, output: 50n, latency: 100n },
  { at: "2026-11-25T10:10:00Z", route: LOCAL, input: 10n, output: 0n, latency: 300n, success: false },
  { at: "2026-11-25T09:59:59.999Z", route: HOSTER, input: 1000n, output: 777n, latency: 200n },
  { at: "2026-11-24T23:30:00Z", route: CLOUD, input: 3000n, output: 1000n, latency: 400n },
  { at: "2026-11-23T00:00:00Z", route: LOCAL, input: 7n, output: 9n, latency: 50n }, // Monday 00:00
  { at: "2026-11-22T23:59:59Z", route: HOSTER, input: 333n, output: 333n, latency: 60n }, // Sunday
  { at: "2026-10-31T12:00:00Z", route: LOCAL, input: 1n, output: 1n, latency: 10n },
  { at: "2026-10-20T12:00:00Z", route: LOCAL, input: 5n, output: 5n, latency: 10n }, // before a 30-day window's first day
  { at: "2026-11-25T10:00:00Z", route: LOCAL, input: 99n, output: 99n, latency: 1n, accountId: other },
];

async function settle(usage: Settled[]): Promise<void> {
  for (const u of usage) {
    clock = new Date(u.at);
    await settleOnLease(t, {
      accountId: u.accountId ?? account,
      inputPricePer1mMicros: PRICES.input,
      outputPricePer1mMicros: PRICES.output,
      ...u.route,
      inputTokens: u.input,
      outputTokens: u.output,
      latencyMs: u.latency,
      success: u.success ?? true,
      errorCode: u.success === false ? "upstream_error" : "",
      startedAt: u.at,
    });
  }
  await t.waitSettled();
  clock = NOW;
}

async function exportPages(accountId: string, days: number): Promise<ExportUsageResponse[]> {
  const pages: ExportUsageResponse[] = [];
  for await (const page of streams.exportUsage(ExportUsageRequest.fromPartial({ accountId, days }))) {
    pages.push(page as ExportUsageResponse);
  }
  return pages;
}

async function refusal(promise: Promise<unknown>): Promise<AppError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => AppError.fromGrpc(e),
  );
  if (!err) throw new Error("expected a refusal");
  return err;
}

const requestsOf = (series: UsageBucket[]) =>
  Object.fromEntries(series.filter((b) => b.figures!.requests > 0n).map((b) => [b.period, b.figures!.requests]));

beforeAll(async () => {
  t = await startTestBilling(
    {
      USAGE_EXPORT_BATCH_SIZE: "4",
      TIERS: JSON.stringify({ free: { limit_per_minute: 10_000, limit_per_day: 100_000 } }),
    },
    { clock: () => clock },
  );
  streams = createClient(BillingServiceClient, `127.0.0.1:${t.billing.port}`, (await testCertificates()).tls("edge"));
  await settle(USAGE);
});
afterAll(async () => {
  streams?.close();
  await t?.close();
});

describe("token usage series (GetUsageTokens)", () => {
  it("hour buckets: from the hour holding now - 1 day through the current hour, zero-filled", async () => {
    const { timeseries, totals } = await t.client.getUsageTokens({ accountId: account, days: 1, interval: "hour" });
    expect(timeseries).toHaveLength(25);
    expect(timeseries[0]!.period).toBe("2026-11-24T10:00:00+00:00");
    expect(timeseries.at(-1)!.period).toBe("2026-11-25T10:00:00+00:00");
    expect(requestsOf(timeseries)).toEqual({
      "2026-11-24T23:00:00+00:00": 1n,
      "2026-11-25T09:00:00+00:00": 1n,
      "2026-11-25T10:00:00+00:00": 2n, // the failed request counts
    });
    const ten = timeseries.at(-1)!;
    expect(ten).toMatchObject({ localRequests: 2n, hosterRequests: 0n, cloudRequests: 0n });
    expect(ten.figures).toMatchObject({ inputTokens: 110n, outputTokens: 50n, latencyMsSum: 400n });
    expect(timeseries.find((b) => b.period === "2026-11-25T09:00:00+00:00")!.hosterRequests).toBe(1n);
    expect(timeseries.find((b) => b.period === "2026-11-24T23:00:00+00:00")!.cloudRequests).toBe(1n);
    expect(totals).toMatchObject({ requests: 4n, inputTokens: 4110n, outputTokens: 1827n });
  });

  it("day buckets: UTC days from the one holding now - days through today", async () => {
    const { timeseries } = await t.client.getUsageTokens({ accountId: account, days: 3, interval: "day" });
    expect(timeseries.map((b) => b.period)).toEqual([
      "2026-11-22T00:00:00+00:00",
      "2026-11-23T00:00:00+00:00",
      "2026-11-24T00:00:00+00:00",
      "2026-11-25T00:00:00+00:00",
    ]);
    expect(timeseries.map((b) => b.figures!.requests)).toEqual([1n, 1n, 1n, 3n]);
  });

  it("week buckets start on Monday (00:00 Monday is the new week, Sunday 23:59 the old)", async () => {
    const { timeseries } = await t.client.getUsageTokens({ accountId: account, days: 14, interval: "week" });
    // now - 14 days is Wednesday 2026-11-11, in the week of Monday 2026-11-09.
    expect(timeseries.map((b) => b.period)).toEqual([
      "2026-11-09T00:00:00+00:00",
      "2026-11-16T00:00:00+00:00",
      "2026-11-23T00:00:00+00:00",
    ]);
    expect(timeseries.map((b) => b.figures!.requests)).toEqual([0n, 1n, 5n]);
  });

  it("month buckets are calendar months, the first one whole", async () => {
    const { timeseries, totals } = await t.client.getUsageTokens({ accountId: account, days: 30, interval: "month" });
    expect(timeseries.map((b) => b.period)).toEqual(["2026-10-01T00:00:00+00:00", "2026-11-01T00:00:00+00:00"]);
    // October is counted whole, so 2026-10-20 is in although it is more than 30 days back.
    expect(timeseries.map((b) => b.figures!.requests)).toEqual([2n, 6n]);
    expect(totals!.requests).toBe(8n);
  });

  it("has one entry per bucket over the longest period", async () => {
    const hours = await t.client.getUsageTokens({ accountId: account, days: 365, interval: "hour" });
    expect(hours.timeseries).toHaveLength(365 * 24 + 1);
    const days = await t.client.getUsageTokens({ accountId: account, days: 365, interval: "day" });
    expect(days.timeseries).toHaveLength(366);
    expect(days.timeseries[0]!.period).toBe("2025-11-25T00:00:00+00:00");
    expect(days.totals!.requests).toBe(8n);
  });

  it("shows nothing of other accounts and zero for an account without usage", async () => {
    const empty = await t.client.getUsageTokens({ accountId: randomUUID(), days: 7, interval: "day" });
    expect(empty.timeseries).toHaveLength(8);
    expect(empty.totals).toMatchObject({ requests: 0n, costMicros: 0n });
    const mine = await t.client.getUsageTokens({ accountId: other, days: 1, interval: "day" });
    expect(mine.totals).toMatchObject({ requests: 1n, inputTokens: 99n });
  });

  it("refuses days outside 1..365 and unknown intervals with invalid_request naming the field", async () => {
    for (const days of [0, 366, -1]) {
      const err = await refusal(t.client.getUsageTokens({ accountId: account, days, interval: "day" }));
      expect(err).toMatchObject({ code: "invalid_request", param: "days" });
    }
    const err = await refusal(t.client.getUsageTokens({ accountId: account, days: 30, interval: "year" }));
    expect(err).toMatchObject({ code: "invalid_request", param: "interval" });
  });
});

describe("cost breakdown (GetUsageBreakdown)", () => {
  it("sums posted shares exactly: platform fee + hoster earnings = cost, equal to the ledger's charges", async () => {
    const { byModel } = await t.client.getUsageBreakdown({ accountId: account, days: 30 });
    // 2026-10-20 is before the window's first day (2026-10-26).
    const expectedCost = (route: Partial<LeaseUsage>) =>
      USAGE.filter((u) => u.route === route && !u.accountId && u.at >= "2026-10-26").reduce(
        (sum, u) => sum + costMicros(u.input, u.output, PRICES.input, PRICES.output),
        0n,
      );
    const hoster = byModel.find((m) => m.provider === "hoster")!;
    expect(hoster.modelId).toBe(HOSTER.modelId);
    expect(hoster.figures).toMatchObject({ requests: 2n, inputTokens: 1333n, outputTokens: 1110n });
    expect(hoster.figures!.costMicros).toBe(expectedCost(HOSTER));
    // Per-request floors: 20% of each posting, summed (not 20% of the total).
    const perRequestFees = USAGE.filter((u) => u.route === HOSTER).reduce(
      (sum, u) => sum + splitRevenue(costMicros(u.input, u.output, PRICES.input, PRICES.output), true).platformFee,
      0n,
    );
    expect(hoster.platformFeeMicros).toBe(perRequestFees);
    expect(hoster.platformFeeMicros + hoster.hosterEarnedMicros).toBe(hoster.figures!.costMicros);

    for (const model of byModel) {
      expect(model.platformFeeMicros + model.hosterEarnedMicros).toBe(model.figures!.costMicros);
    }
    const local = byModel.find((m) => m.provider === "local")!;
    expect(local).toMatchObject({ modelId: "demo-small", hosterEarnedMicros: 0n });
    expect(local.figures!.requests).toBe(4n);
    expect(byModel.map((m) => m.provider).sort()).toEqual(["cloud", "hoster", "local"]);

    // Over the whole year the breakdown's cost is exactly what the ledger charged the customer.
    const year = await t.client.getUsageBreakdown({ accountId: account, days: 365 });
    const [charged] = await t.query<{ sum: string }>(
      `select (-sum(amount_micros))::text as sum from ledger_postings p join journal_entries e on e.id = p.entry_id
       where e.kind in ('usage', 'usage_batch') and p.ledger_account = $1`,
      [`customer:${account}`],
    );
    expect(year.byModel.reduce((sum, m) => sum + m.figures!.costMicros, 0n)).toBe(BigInt(charged!.sum));
  });

  it("daily: one zero-filled entry per UTC day of the window", async () => {
    const { daily } = await t.client.getUsageBreakdown({ accountId: account, days: 3 });
    expect(daily.map((d) => d.date)).toEqual(["2026-11-22", "2026-11-23", "2026-11-24", "2026-11-25"]);
    expect(daily.map((d) => d.figures!.requests)).toEqual([1n, 1n, 1n, 3n]);
    expect(daily[3]!.figures).toMatchObject({ inputTokens: 1110n, outputTokens: 827n });
    const year = await t.client.getUsageBreakdown({ accountId: account, days: 365 });
    expect(year.daily).toHaveLength(366);
  });
});

describe("usage export (ExportUsage stream)", () => {
  it("streams every record of the window oldest first, failed ones with success=false, in pages", async () => {
    const pages = await exportPages(account, 30);
    expect(pages.map((p) => p.rows.length)).toEqual([4, 3]); // USAGE_EXPORT_BATCH_SIZE = 4
    const rows = pages.flatMap((p) => p.rows);
    expect(rows.map((r) => r.timestamp)).toEqual([
      "2026-10-31T12:00:00.000Z",
      "2026-11-22T23:59:59.000Z",
      "2026-11-23T00:00:00.000Z",
      "2026-11-24T23:30:00.000Z",
      "2026-11-25T09:59:59.999Z",
      "2026-11-25T10:05:00.000Z",
      "2026-11-25T10:10:00.000Z",
    ]);
    expect(rows.at(-1)).toMatchObject({ modelId: "demo-small", provider: "local", success: false, latencyMs: 300n });
    expect(rows[4]).toMatchObject({
      modelId: HOSTER.modelId,
      provider: "hoster",
      inputTokens: 1000n,
      outputTokens: 777n,
      costMicros: costMicros(1000n, 777n, PRICES.input, PRICES.output),
      success: true,
    });
  });

  it("is complete and in (time, request id) order across page boundaries, ties included", async () => {
    const busy = randomUUID();
    const sameInstant = "2026-11-25T08:00:00.123456Z";
    const batch: Settled[] = Array.from({ length: 21 }, (_, i) => ({
      at: i % 3 === 0 ? `2026-11-2${i % 5}T07:00:00Z` : sameInstant,
      route: LOCAL,
      input: BigInt(i + 1),
      output: 1n,
      latency: 1n,
      accountId: busy,
    }));
    await settle(batch);
    const pages = await exportPages(busy, 365);
    expect(pages.every((p) => p.rows.length <= 4)).toBe(true);
    const rows = pages.flatMap((p) => p.rows);
    expect(rows).toHaveLength(21);
    expect(rows.map((r) => r.inputTokens).sort((a, b) => Number(a - b))).toEqual(batch.map((u) => u.input));
    const stored = await t.query<{ input_tokens: string }>(
      `select input_tokens from usage_records where account_id = $1 order by created_at, request_id`,
      [busy],
    );
    expect(rows.map((r) => r.inputTokens.toString())).toEqual(stored.map((r) => r.input_tokens));
  });

  it("an empty window ends the stream with no pages; bad days is invalid_request", async () => {
    expect(await exportPages(randomUUID(), 30)).toEqual([]);
    const err = await refusal(exportPages(account, 0));
    expect(err).toMatchObject({ code: "invalid_request", param: "days" });
  });

  it("a caller that cancels mid-stream ends the call; the next export still works", async () => {
    const call = streams.exportUsage(ExportUsageRequest.fromPartial({ accountId: account, days: 30 }));
    const first = await new Promise<ExportUsageResponse>((resolve) => call.once("data", resolve));
    expect(first.rows).toHaveLength(4);
    const ended = new Promise<string>((resolve) =>
      call.on("error", (err: { code?: number }) => resolve(String(err.code))),
    );
    call.cancel();
    expect(await ended).toBe("1"); // CANCELLED
    expect((await exportPages(account, 30)).flatMap((p) => p.rows)).toHaveLength(7);
  });
});
