import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import { refusal } from "@mkt/testkit/refusal";
import type { GrantLeaseRequest, LeaseState } from "@mkt/proto/billing/v1/leases";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { SETTLE_MARGIN_MS } from "../src/leases/settling-holds.ts";
import { admitOnLease, ledgerInvariants, startTestBilling, waitFor, type TestBilling } from "./billing-harness.ts";

// The production settlement window: a request's hold is released up to one window after it ended.
const WINDOW_MS = 250;
// Each request's worst case and what it costs: the balance pays exactly two, one at a time.
const WORST_CASE = 3_000n;
const COST = 2_000n; // 1000 input tokens at $0.50 and 1000 output tokens at $1.50 per 1M
const BALANCE = COST + WORST_CASE;

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling({
    SETTLE_BATCH_WINDOW_MS: String(WINDOW_MS),
    STARTING_CREDIT_USD: (Number(BALANCE) / 1e6).toFixed(6),
  });
});
afterAll(() => t?.close());

const recorded = async (requestId: string) =>
  (await t.query(`select 1 from usage_records where request_id = $1`, [requestId])).length > 0;

describe("a grant short only by requests still settling", () => {
  it("waits for them: a balance that pays two requests back to back gets both, and a third gets 402", async () => {
    const accountId = randomUUID();
    const edgeId = `edge_${randomUUID()}`;
    let sequence = 0n;
    const grant = (lease: LeaseState | undefined) => {
      const request: GrantLeaseRequest = {
        edgeId,
        incarnation: 0n,
        bootId: "",
        sequence: ++sequence,
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: { creditMicros: WORST_CASE, requests: 1n, tokens: 0n, subscriptionId: "", keyId: "" },
        // The edge admitted all its lease's credit: each request took the whole of it.
        report: lease && {
          leaseId: lease.leaseId,
          admitted: [{ allowanceId: lease.credit!.allowanceId, admitted: lease.credit!.granted }],
          final: false,
          budgetDemand: [],
          nextWindow: false,
          slotsPinned: false,
        },
      };
      return t.client.grantLease(request);
    };
    const ended = (lease: LeaseState) =>
      UsageCompleted.fromPartial({
        requestId: newRequestId(),
        accountId,
        keyId: "key_1",
        modelId: "demo-small",
        provider: "local",
        leaseId: lease.leaseId,
        worstCaseMicros: WORST_CASE,
        inputPricePer1mMicros: 500_000n,
        outputPricePer1mMicros: 1_500_000n,
        inputTokens: 1000n,
        outputTokens: 1000n,
        success: true,
        latencyMs: 10n,
      });
    // Another account's request settles first, so the settler is inside its window when this
    // account's requests end: each of their events waits for the window's end to settle.
    const opener = await admitOnLease(t, { accountId: randomUUID(), inputTokens: 10n, outputTokens: 10n });

    const { lease: first } = await grant(undefined);
    await t.publishUsage(opener);
    await waitFor(() => recorded(opener.requestId), Boolean);
    const one = ended(first!);
    await t.publishUsage(one);
    // The second request comes at once: its grant is short by what the first still holds.
    expect(await recorded(one.requestId)).toBe(false);
    let sent = performance.now();
    const { lease: second } = await grant(first);
    const waited = performance.now() - sent;
    expect(second!.credit!.granted).toBe(2n * WORST_CASE);
    expect(await recorded(one.requestId)).toBe(true);
    // At most about one window (and a loaded machine's slack).
    expect(waited).toBeLessThan(WINDOW_MS + SETTLE_MARGIN_MS + 500);

    const two = ended(second!);
    await t.publishUsage(two);
    sent = performance.now();
    const third = await refusal(grant(second));
    expect(third.code).toBe("insufficient_credits");
    // Refused only once the second settled: what is left (1,000) cannot pay a 3,000 worst case.
    expect(await recorded(two.requestId)).toBe(true);
    expect(performance.now() - sent).toBeLessThan(WINDOW_MS + SETTLE_MARGIN_MS + 500);
    const [wallet] = await t.query(`select posted_micros, held_micros from wallets where account_id = $1`, [accountId]);
    expect(wallet).toEqual({ posted_micros: String(BALANCE - 2n * COST), held_micros: "0" });
    await t.waitSettled();
    await ledgerInvariants(t);
  });

  it("refuses at once when settling could not cover the request", async () => {
    const accountId = randomUUID();
    const sent = performance.now();
    const err = await refusal(
      t.client.grantLease({
        edgeId: `edge_${randomUUID()}`,
        incarnation: 0n,
        bootId: "",
        sequence: 1n,
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: { creditMicros: BALANCE + 1n, requests: 1n, tokens: 0n, subscriptionId: "", keyId: "" },
      }),
    );
    expect(err.code).toBe("insufficient_credits");
    // Nothing of the account is settling: no wait for a window.
    expect(performance.now() - sent).toBeLessThan(WINDOW_MS);
  });
});
