import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import type { LeaseNeed } from "@mkt/proto/billing/v1/leases";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

// Billing's /metrics as Prometheus scrapes it: a real billing on METRICS_PORT=0, events published
// to real JetStream and settled by the consumer into real Postgres (the write-off as in
// lease-settlement.test.ts).
const TTL = 2_000;
const MAX_REQUEST = 60_000;
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
let offsetMs = 0;
let t: TestBilling;

beforeAll(async () => {
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      MAX_REQUEST_MS: String(MAX_REQUEST),
      STARTING_CREDIT_USD: "0.01",
      TIERS: JSON.stringify({ free: { limit_per_minute: 1000, limit_per_day: 100000 } }),
    },
    { clock: () => new Date(BASE + offsetMs) },
  );
});
afterAll(async () => {
  await t?.close();
});

async function scrape(): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${t.billing.metricsPort}/metrics`);
  expect(response.status).toBe(200);
  return response.text();
}

/** The value of one series (`name` or `name{labels}` exactly as exposed), 0 when absent. */
function value(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

const edge = () => `edge_${randomUUID()}`;
const need = (credit: bigint): LeaseNeed => ({
  creditMicros: credit,
  requests: 1n,
  tokens: 0n,
  subscriptionId: "",
  keyId: "",
});
const grant = async (accountId: string, credit: bigint, edgeId = edge()) =>
  (
    await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request: need(credit),
    })
  ).lease!;

const usage = (leaseId: string, accountId: string, fields: Partial<UsageCompleted>): Partial<UsageCompleted> => ({
  requestId: newRequestId(),
  accountId,
  keyId: "key_1",
  modelId: "demo-small",
  provider: "local",
  leaseId,
  inputPricePer1mMicros: 500_000n,
  outputPricePer1mMicros: 1_500_000n,
  success: true,
  latencyMs: 10n,
  startedAt: new Date(BASE + offsetMs).toISOString(),
  ...fields,
});

async function settle(event: Partial<UsageCompleted>) {
  await t.publishUsage(event);
  await t.waitSettled();
}

describe("billing's /metrics", () => {
  it("listens on its own port, separate from gRPC", () => {
    expect(t.billing.metricsPort).toBeGreaterThan(0);
    expect(t.billing.metricsPort).not.toBe(t.billing.port);
  });

  it("counts a settled event by outcome and observes its lag from publish to commit", async () => {
    const before = await scrape();
    expect(before).toContain('mkt_usage_events_settled_total{outcome="settled"} 0');
    const accountId = randomUUID();
    const lease = await grant(accountId, 8_000n);
    await settle(usage(lease.leaseId, accountId, { inputTokens: 10n, outputTokens: 20n, worstCaseMicros: 8_000n }));

    const after = await scrape();
    const settled = 'mkt_usage_events_settled_total{outcome="settled"}';
    expect(value(after, settled) - value(before, settled)).toBe(1);
    expect(value(after, "mkt_settlement_lag_seconds_count") - value(before, "mkt_settlement_lag_seconds_count")).toBe(
      1,
    );
    // Published and settled within this test: well under a minute, and never negative.
    const lagSum = value(after, "mkt_settlement_lag_seconds_sum") - value(before, "mkt_settlement_lag_seconds_sum");
    expect(lagSum).toBeGreaterThanOrEqual(0);
    expect(lagSum).toBeLessThan(60);
    expect(value(after, 'mkt_settlement_lag_seconds_bucket{le="60"}')).toBeGreaterThanOrEqual(1);
  });

  it("counts a write-off and its micro-dollars once the late event's settlement commits", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const l = await grant(accountId, 8_000n, edgeId);
    await t.client.returnLeases({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        {
          leaseId: l.leaseId,
          admitted: [{ allowanceId: l.credit!.allowanceId, admitted: 8_000n }],
          final: true,
          budgetDemand: [],
          nextWindow: false,
          slotsPinned: true,
        },
      ],
    });
    offsetMs += MAX_REQUEST;
    await t.billing.closeDueLeases();
    // Another edge holds all but 100 µ$, so the late event's 3,000 µ$ leave 2,900 written off.
    await grant(accountId, 9_900n);
    const before = await scrape();
    await settle(usage(l.leaseId, accountId, { inputTokens: 0n, outputTokens: 2_000n, worstCaseMicros: 8_000n }));

    const after = await scrape();
    const delta = (series: string) => value(after, series) - value(before, series);
    expect(delta("mkt_write_offs_total")).toBe(1);
    expect(delta("mkt_write_off_microdollars_total")).toBe(2_900);
    expect(delta('mkt_usage_events_settled_total{outcome="late_settled"}')).toBe(1);
  });

  it("counts leases the closer closed at their deadline", async () => {
    const accountId = randomUUID();
    await grant(accountId, 1_000n);
    // The edge never heartbeats nor reports: its session lapses, then EDGE_ISOLATION_MS (60 s) passes.
    offsetMs += 60_000 + 2 * TTL;
    const before = await scrape();
    const { closed } = await t.billing.closeDueLeases();
    expect(closed).toBeGreaterThanOrEqual(1);
    const after = await scrape();
    const series = "mkt_leases_closed_by_deadline_total";
    expect(value(after, series) - value(before, series)).toBe(closed);
  });

  it("counts edge incarnations, and the leases a restarted edge's new one closed", async () => {
    const edgeId = edge();
    const before = await scrape();
    // A process starts under the id and takes a lease; it dies, and the next one starts.
    await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: randomUUID(),
      sequence: 1n,
      accountId: randomUUID(),
      tier: "free",
      minCreditMicros: 0n,
      request: need(1_000n),
    });
    await t.client.heartbeat({
      edgeId,
      incarnation: 0n,
      bootId: randomUUID(),
      sequence: 1n,
      leases: [],
      unansweredGrantAccounts: [],
    });
    const after = await scrape();
    const delta = (series: string) => value(after, series) - value(before, series);
    expect(delta("mkt_edge_incarnations_total")).toBe(2);
    expect(delta("mkt_leases_closed_by_incarnation_total")).toBe(1);
  });

  it("answers 404 off /metrics", async () => {
    const response = await fetch(`http://127.0.0.1:${t.billing.metricsPort}/other`);
    expect(response.status).toBe(404);
  });
});
