import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authorizeRequest, ledgerInvariants, startTestBilling, waitFor, type TestBilling } from "./billing-harness.ts";

let t: TestBilling;
let offsetMs = 0;
const TTL_SECONDS = 60;
beforeAll(async () => {
  t = await startTestBilling(
    { RESERVATION_TTL_SECONDS: String(TTL_SECONDS) },
    { clock: () => new Date(Date.now() + offsetMs) },
  );
});
afterAll(async () => {
  await t?.close();
});

/** Moves the service's clock past every deadline set so far, sweeps, and returns the result. */
async function sweepAfterExpiry() {
  offsetMs += (TTL_SECONDS + 1) * 1000;
  await t.waitSettled();
  return t.billing.sweepExpiredReservations();
}

describe("reservation expiry", () => {
  it("leaves reservations alone before their deadline", async () => {
    const res = await t.client.authorize(authorizeRequest({ requestedMaxOutputTokens: 200n }));
    await t.waitSettled();
    const sweep = await t.billing.sweepExpiredReservations();
    expect(sweep.ran).toBe(true);
    expect(await t.query(`select status from reservations where id = $1`, [res.reservationId])).toEqual([
      { status: "held" },
    ]);
  });

  it("expires a reservation with no event: hold released, failed usage row, nothing charged", async () => {
    const accountId = randomUUID();
    const req = authorizeRequest({ accountId, requestedMaxOutputTokens: 200n });
    const res = await t.client.authorize(req);
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n - 350n);

    const sweep = await sweepAfterExpiry();
    expect(sweep.ran).toBe(true);
    expect(sweep.expired).toBeGreaterThanOrEqual(1);

    expect(await t.query(`select status from reservations where id = $1`, [res.reservationId])).toEqual([
      { status: "expired" },
    ]);
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n);
    const [record] = await t.query(`select success, error_code, cost_micros from usage_records where request_id = $1`, [
      req.requestId,
    ]);
    expect(record).toEqual({ success: false, error_code: "reservation_expired", cost_micros: "0" });
    const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
    expect(summary.usage30d).toMatchObject({ totalRequests: 1n, totalCostMicros: 0n });
  });

  it("settles a late event after expiry, charging at most the reserved amount", async () => {
    const accountId = randomUUID();
    const req = authorizeRequest({ accountId, requestedMaxOutputTokens: 200n });
    const res = await t.client.authorize(req);
    await sweepAfterExpiry();
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n);

    // The upstream claims far more output than was reserved; the charge stops at the hold.
    await t.publishUsage({
      requestId: req.requestId,
      reservationId: res.reservationId,
      accountId,
      keyId: req.keyId,
      modelId: req.modelId,
      provider: req.provider,
      inputTokens: 100n,
      outputTokens: 5_000n,
      latencyMs: 900n,
      success: true,
    });
    await waitFor(
      () => t.query(`select status from reservations where id = $1`, [res.reservationId]),
      (rows) => rows[0]?.status === "settled",
    );
    const [record] = await t.query(
      `select success, error_code, cost_micros, output_tokens from usage_records where request_id = $1`,
      [req.requestId],
    );
    expect(record).toEqual({ success: true, error_code: "", cost_micros: "350", output_tokens: "5000" });
    const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
    expect(summary.creditBalanceMicros).toBe(5_000_000n - 350n);
    // The late event replaced the expiry row: still one request, now with its cost and latency.
    expect(summary.usage30d).toEqual({
      totalRequests: 1n,
      totalInputTokens: 100n,
      totalOutputTokens: 5000n,
      totalCostMicros: 350n,
      avgLatencyMs: 900,
    });
    const [hourly] = await t.query(`select sum(failed)::text as failed from usage_hourly where account_id = $1`, [
      accountId,
    ]);
    expect(hourly?.failed).toBe("0");

    // Replaying the late event changes nothing.
    await t.publishUsage(
      { requestId: req.requestId, accountId, inputTokens: 100n, outputTokens: 1n, success: true },
      `${req.requestId}-again`,
    );
    await t.waitSettled();
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n - 350n);
  });

  it("keeps the ledger balanced and no hold outstanding", async () => {
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
    const [held] = await t.query(`select coalesce(sum(held_micros), 0)::text as held from wallets`);
    const [open] = await t.query(
      `select coalesce(sum(reserved_micros), 0)::text as held from reservations where status = 'held'`,
    );
    expect(held).toEqual(open);
  });
});
