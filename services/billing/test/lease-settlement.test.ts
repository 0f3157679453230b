import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import type { LeaseNeed, LeaseState } from "@mkt/proto/billing/v1/leases";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { ledgerInvariants, settlementOf, startTestBilling, type TestBilling } from "./billing-harness.ts";

// Settlement of usage.completed events admitted on admission leases
// (docs/architecture.md#settlement): real billing, real Postgres, events published to real
// JetStream and settled by the consumer.
const TTL = 2_000;
const MAX_REQUEST = 60_000;
// A fixed clock 10 s into a UTC minute, inside the subscriptions' period.
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

const edge = () => `edge_${randomUUID()}`;
const need = (credit: bigint, subscriptionId = "", tokens = 0n): LeaseNeed => ({
  creditMicros: credit,
  requests: 1n,
  tokens,
  subscriptionId,
  keyId: "",
});
const grant = async (accountId: string, request: LeaseNeed, edgeId = edge()) =>
  (
    await t.client.grantLease({
      edgeId,
      incarnation: 0n,
      bootId: "",
      sequence: 1n,
      accountId,
      tier: "free",
      minCreditMicros: 0n,
      request,
    })
  ).lease!;

/** A usage.completed as registry publishes it for a request admitted on `lease`. */
const usage = (lease: LeaseState, accountId: string, fields: Partial<UsageCompleted>): Partial<UsageCompleted> => ({
  requestId: newRequestId(),
  accountId,
  keyId: "key_1",
  modelId: "demo-small",
  provider: "local",
  leaseId: lease.leaseId,
  // $0.50 / $1.50 per 1M tokens
  inputPricePer1mMicros: 500_000n,
  outputPricePer1mMicros: 1_500_000n,
  success: true,
  latencyMs: 10n,
  startedAt: new Date(BASE + offsetMs).toISOString(),
  ...fields,
});

async function settle(...events: Array<Partial<UsageCompleted>>) {
  for (const event of events) await t.publishUsage(event);
  await t.waitSettled();
}

async function free(accountId: string): Promise<bigint> {
  const { posted, held } = await wallet(accountId);
  return posted - held;
}

async function wallet(accountId: string) {
  const [row] = await t.query<{ posted: string; held: string }>(
    `select posted_micros as posted, held_micros as held from wallets where account_id = $1`,
    [accountId],
  );
  return { posted: BigInt(row!.posted), held: BigInt(row!.held) };
}

async function lease(id: string) {
  const [row] = await t.query<{ held: string; settled: string }>(
    `select held_micros as held, settled_micros as settled from leases where id = $1`,
    [id],
  );
  return { held: BigInt(row!.held), settled: BigInt(row!.settled) };
}

const record = async (requestId: string) =>
  (await t.query<Record<string, string>>(`select * from usage_records where request_id = $1`, [requestId]))[0];

/**
 * Conservation for one account: its wallet holds exactly its leases' holds, each lease holds granted − settled (open, fenced) or admitted − settled (closed)
 * until released, and grants + write-offs − usage charged − posted balance = 0.
 */
async function conservation(accountId: string) {
  const [row] = await t.query<Record<string, string>>(
    `select w.held_micros - coalesce((select sum(held_micros) from leases where account_id = w.account_id), 0)
         as held_gap,
       (select count(*) from leases l join lease_allowances a on a.lease_id = l.id and a.resource = 'credit'
         where l.account_id = w.account_id and l.released_at is null and l.held_micros <> case when l.status = 'closed'
           then a.admitted - l.settled_micros else a.granted - l.settled_micros end) as bad_leases,
       coalesce((select sum(p.amount_micros) from ledger_postings p join journal_entries e on e.id = p.entry_id
         where p.ledger_account = 'customer:' || w.account_id and e.kind = 'grant'), 0)
         - coalesce((select sum(cost_micros - write_off_micros) from usage_records where account_id = w.account_id), 0)
         - w.posted_micros as money_gap
     from wallets w where w.account_id = $1`,
    [accountId],
  );
  return { heldGap: Number(row!.held_gap), badLeases: Number(row!.bad_leases), moneyGap: Number(row!.money_gap) };
}

describe("settlement from lease holds", () => {
  it("clamps the charge to the worst case and releases exactly the worst case from the hold", async () => {
    const accountId = randomUUID();
    const l = await grant(accountId, need(5_000n));
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: 5_000n });

    // Reports far more tokens than admitted: charged its worst case, no more.
    const greedy = usage(l, accountId, { inputTokens: 100n, outputTokens: 1_000_000n, worstCaseMicros: 3_000n });
    await settle(greedy);
    expect(await record(greedy.requestId!)).toMatchObject({ cost_micros: "3000" });
    expect(await wallet(accountId)).toEqual({ posted: 7_000n, held: 2_000n });
    expect(await lease(l.leaseId)).toEqual({ held: 2_000n, settled: 3_000n });

    // ceil((100 × 0.5 + 150 × 1.5) / 1M USD) = 275: the hold drops by the whole worst case.
    const small = usage(l, accountId, { inputTokens: 100n, outputTokens: 150n, worstCaseMicros: 2_000n });
    await settle(small);
    expect(await record(small.requestId!)).toMatchObject({ cost_micros: "275", platform_fee_micros: "275" });
    expect(await wallet(accountId)).toEqual({ posted: 6_725n, held: 0n });
    expect(await lease(l.leaseId)).toEqual({ held: 0n, settled: 5_000n });
    // The balance shown is posted − held.
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(6_725n);
    expect(await conservation(accountId)).toEqual({ heldGap: 0, badLeases: 0, moneyGap: 0 });
  });

  it("a run of events over two leases conserves every micro-dollar", async () => {
    const accountId = randomUUID();
    const a = await grant(accountId, need(3_000n));
    const b = await grant(accountId, need(3_000n));
    const events = [
      usage(a, accountId, { inputTokens: 100n, outputTokens: 150n, worstCaseMicros: 1_000n }),
      usage(a, accountId, { inputTokens: 1_000n, outputTokens: 0n, worstCaseMicros: 400n }),
      usage(b, accountId, { inputTokens: 100n, outputTokens: 5_000n, worstCaseMicros: 1_000n }),
      usage(b, accountId, {
        inputTokens: 1_000n,
        outputTokens: 500n,
        worstCaseMicros: 1_500n,
        provider: "hoster",
        hosterId: "hoster-9",
        inputPricePer1mMicros: 1_000_000n,
        outputPricePer1mMicros: 2_000_000n,
      }),
    ];
    // Published together: the consumer settles them in one or more batches.
    await Promise.all(events.map((e) => t.publishUsage(e)));
    await t.waitSettled();
    const costs = await Promise.all(events.map(async (e) => (await record(e.requestId!))!.cost_micros));
    // 275; 1,000 × 0.5 = 500 clamped to 400; ceil(100 × 0.5 + 5,000 × 1.5) = 7,550 clamped to
    // 1,000; 1,000 + 1,000 = 2,000 clamped to 1,500.
    expect(costs).toEqual(["275", "400", "1000", "1500"]);
    // The hoster's share of what was charged, 80/20.
    expect(await record(events[3]!.requestId!)).toMatchObject({
      platform_fee_micros: "300",
      hoster_earned_micros: "1200",
      hoster_id: "hoster-9",
    });
    expect(await lease(a.leaseId)).toEqual({ held: 1_600n, settled: 1_400n });
    expect(await lease(b.leaseId)).toEqual({ held: 500n, settled: 2_500n });
    // Wallet held = the open leases' holds.
    expect(await wallet(accountId)).toEqual({ posted: 10_000n - 3_175n, held: 1_600n + 500n });

    // The edge returns lease A having admitted 2,000 in all: 600 more than settled stays held.
    await t.client.returnLeases({
      edgeId: (await t.query<{ edge_id: string }>(`select edge_id from leases where id = $1`, [a.leaseId]))[0]!.edge_id,
      incarnation: 0n,
      bootId: "",
      sequence: 2n,
      leases: [
        {
          leaseId: a.leaseId,
          admitted: [{ allowanceId: a.credit!.allowanceId, admitted: 2_000n }],
          final: true,
          budgetDemand: [],
          nextWindow: false,
          slotsPinned: true,
        },
      ],
    });
    expect(await lease(a.leaseId)).toEqual({ held: 600n, settled: 1_400n });
    const closing = usage(a, accountId, { inputTokens: 10n, outputTokens: 10n, worstCaseMicros: 600n });
    await settle(closing);
    expect(await lease(a.leaseId)).toEqual({ held: 0n, settled: 2_000n });
    expect(await conservation(accountId)).toEqual({ heldGap: 0, badLeases: 0, moneyGap: 0 });
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("a redelivered request_id changes nothing", async () => {
    const accountId = randomUUID();
    const l = await grant(accountId, need(2_000n));
    const event = usage(l, accountId, { inputTokens: 100n, outputTokens: 150n, worstCaseMicros: 1_000n });
    await settle(event);
    const before = { wallet: await wallet(accountId), lease: await lease(l.leaseId) };
    for (let i = 0; i < 3; i++) await t.publishUsage(event, `${event.requestId}-replay-${i}`);
    await t.waitSettled();
    expect({ wallet: await wallet(accountId), lease: await lease(l.leaseId) }).toEqual(before);
    expect(await t.query(`select 1 from usage_records where request_id = $1`, [event.requestId])).toHaveLength(1);
    // Its one charge: the customer leg of the one batch entry that settled it.
    const { record, legs, recordsInEntry } = await settlementOf(t, event.requestId!);
    expect(recordsInEntry).toBe(1);
    expect(legs[`customer:${accountId}`]).toBe(`-${record.cost_micros}`);
    expect(
      await t.query(`select 1 from ledger_postings where ledger_account = $1 and amount_micros < 0`, [
        `customer:${accountId}`,
      ]),
    ).toHaveLength(1);
    expect(await conservation(accountId)).toEqual({ heldGap: 0, badLeases: 0, moneyGap: 0 });
  });

  it("a subscription request counts its tokens in the period and gives back its unused worst case", async () => {
    const accountId = randomUUID();
    const subscriptionId = randomUUID();
    await t.query(
      `insert into subscriptions (id, account_id, idempotency_key, product_id, status, hoster_id, pricing_model,
         included_tokens, rpm_limit, tpm_limit, max_concurrent, max_output_tokens, max_context_tokens,
         period_index, period_start, period_end, activated_at, created_at)
       values ($1, $2, 'k', $3, 'active', $4, 'subscription', 10000, 60, 100000, 5, 4096, 8192, 0, $5, $6, $5, $5)`,
      [
        subscriptionId,
        accountId,
        randomUUID(),
        randomUUID(),
        new Date(BASE - 86_400_000),
        new Date(BASE + 20 * 86_400_000),
      ],
    );
    const l = await grant(accountId, need(0n, subscriptionId, 1_000n));
    const rooms = async () =>
      Object.fromEntries(
        (
          await t.query<{ resource: string; granted: string; settled: string }>(
            `select resource, granted, settled from lease_allowances where lease_id = $1 and scope = $2`,
            [l.leaseId, subscriptionId],
          )
        ).map((r) => [r.resource, { granted: BigInt(r.granted), settled: BigInt(r.settled) }]),
      );
    const minuteTokens = async () =>
      BigInt(
        (
          await t.query<{ tokens: string }>(
            `select tokens from subscription_rate_counters where subscription_id = $1`,
            [subscriptionId],
          )
        )[0]!.tokens,
      );
    const granted = await rooms();
    expect(granted.included_tokens!.granted).toBeGreaterThanOrEqual(1_000n);
    const tpmBefore = await minuteTokens();
    expect(tpmBefore).toBe(granted.sub_tokens_minute!.granted);

    const event = usage(l, accountId, {
      subscriptionId,
      provider: "hoster",
      inputTokens: 100n,
      outputTokens: 200n,
      worstCaseTokens: 1_000n,
      worstCaseMicros: 0n,
      // The edge took all of its worst case from the budget's included room.
      includedTokens: 1_000n,
      // Registry prices hoster routes at 0; the subscription's terms decide.
      inputPricePer1mMicros: 0n,
      outputPricePer1mMicros: 0n,
    });
    await settle(event);
    expect(await record(event.requestId!)).toMatchObject({ subscription_id: subscriptionId, cost_micros: "0" });
    const [period] = await t.query<{ used_tokens: string }>(
      `select used_tokens from subscription_usage where subscription_id = $1 and period_index = 0`,
      [subscriptionId],
    );
    expect(period!.used_tokens).toBe("300");
    // What it took leaves the lease's hold of the included tokens; the period counts the 300 used.
    expect((await rooms()).included_tokens!.settled).toBe(1_000n);
    // The 700 tokens not used go back to the current minute's tpm.
    expect(await minuteTokens()).toBe(tpmBefore - 700n);
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: 0n });

    // A redelivery gives nothing back twice.
    await t.publishUsage(event, `${event.requestId}-again`);
    await t.waitSettled();
    expect(await minuteTokens()).toBe(tpmBefore - 700n);
    expect((await rooms()).included_tokens!.settled).toBe(1_000n);
  });

  it("a late event on a lease its edge's next incarnation released is charged what is available", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const l = await grant(accountId, need(8_000n), edgeId);
    // The edge dies with the request running; it starts again under the same id.
    await t.client.heartbeat({
      edgeId,
      incarnation: 0n,
      bootId: randomUUID(),
      sequence: 1n,
      leases: [],
      unansweredGrantAccounts: [],
    });
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: 0n });
    const other = await grant(accountId, need(9_900n));
    // The dead process's request is settled afterwards: its hold is gone, so it pays what is free.
    const late = usage(l, accountId, { inputTokens: 0n, outputTokens: 2_000n, worstCaseMicros: 8_000n });
    await settle(late);
    expect(await record(late.requestId!)).toMatchObject({ cost_micros: "3000" });
    expect(await wallet(accountId)).toEqual({ posted: 9_900n, held: 9_900n });
    expect(await lease(other.leaseId)).toEqual({ held: 9_900n, settled: 0n });
    expect(await conservation(accountId)).toEqual({ heldGap: 0, badLeases: 0, moneyGap: 0 });
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  // Last: it moves the clock past MAX_REQUEST_MS, which lets the closer release every lease above.
  it("a late event after the closer released its lease is charged what is available and the rest written off", async () => {
    const accountId = randomUUID();
    const edgeId = edge();
    const l = await grant(accountId, need(8_000n), edgeId);
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
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: 0n });
    // Another edge now holds almost all of the balance: 100 µ$ are available.
    const other = await grant(accountId, need(9_900n));
    // Free in the wallet (posted − held): what a grant may still take. (GetBalance would add the
    // other lease's unspent room back: it reports use, not holds.)
    expect(await free(accountId)).toBe(100n);

    // Costs ceil(2,000 × 1.5) = 3,000 ≤ its worst case, but its hold is gone.
    const late = usage(l, accountId, { inputTokens: 0n, outputTokens: 2_000n, worstCaseMicros: 8_000n });
    await settle(late);
    expect(await record(late.requestId!)).toMatchObject({ cost_micros: "3000" });
    expect(await wallet(accountId)).toEqual({ posted: 9_900n, held: 9_900n });
    expect(await free(accountId)).toBe(0n);
    // The write-off is on the record and folded into its batch's entry: the customer pays the 100
    // it had (−3,000 + 2,900), the platform keeps the whole cost of a local model and absorbs 2,900.
    const { record: lateRecord, legs, recordsInEntry } = await settlementOf(t, late.requestId!);
    expect(lateRecord).toMatchObject({ cost_micros: "3000", write_off_micros: "2900" });
    expect(recordsInEntry).toBe(1);
    expect(legs).toEqual({
      [`customer:${accountId}`]: "-100",
      "platform:revenue": "3000",
      "platform:write_offs": "-2900",
    });
    // The other lease's hold was never touched.
    expect(await lease(other.leaseId)).toEqual({ held: 9_900n, settled: 0n });
    expect(await conservation(accountId)).toEqual({ heldGap: 0, badLeases: 0, moneyGap: 0 });
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });
});

// Only registry may publish usage events (NATS permissions, docs/deploy.md "NATS users"); billing
// still checks each one against its lease, so a forged or garbled event charges nobody.
describe("events their lease refutes", () => {
  async function outcomes(): Promise<Record<string, number>> {
    const text = await (await fetch(`http://127.0.0.1:${t.billing.metricsPort}/metrics`)).text();
    return Object.fromEntries(
      [...text.matchAll(/^mkt_usage_events_settled_total\{outcome="(\w+)"\} (\d+)$/gm)].map((m) => [
        m[1]!,
        Number(m[2]),
      ]),
    );
  }
  /** Settles `event` and returns how each outcome's count moved. */
  async function settledAs(event: Partial<UsageCompleted>): Promise<Record<string, number>> {
    const before = await outcomes();
    await settle(event);
    const after = await outcomes();
    return Object.fromEntries(
      Object.entries(after)
        .filter(([outcome, n]) => n !== (before[outcome] ?? 0))
        .map(([outcome, n]) => [outcome, n - (before[outcome] ?? 0)]),
    );
  }

  it("records an event naming an unknown lease at no cost", async () => {
    const accountId = randomUUID();
    const l = await grant(accountId, need(5_000n));
    const forged = usage({ ...l, leaseId: randomUUID() }, accountId, {
      inputTokens: 100n,
      outputTokens: 1_000n,
      worstCaseMicros: 2_000n,
    });
    expect(await settledAs(forged)).toEqual({ unknown_lease: 1 });
    expect(await record(forged.requestId!)).toMatchObject({ account_id: accountId, cost_micros: "0" });
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: 5_000n });
  });

  it("refuses an event naming another account's lease: neither account is charged, the lease keeps its hold", async () => {
    const victim = randomUUID();
    const other = randomUUID();
    const l = await grant(victim, need(5_000n));
    await grant(other, need(1_000n));
    const forged = usage(l, other, { inputTokens: 100n, outputTokens: 1_000n, worstCaseMicros: 2_000n });
    expect(await settledAs(forged)).toEqual({ foreign_lease: 1 });
    expect(await record(forged.requestId!)).toMatchObject({ account_id: other, cost_micros: "0" });
    expect(await wallet(victim)).toEqual({ posted: 10_000n, held: 5_000n });
    expect(await lease(l.leaseId)).toEqual({ held: 5_000n, settled: 0n });
    expect(await wallet(other)).toEqual({ posted: 10_000n, held: 1_000n });
  });

  it("refuses an event whose worst case exceeds all the credit its lease was ever granted", async () => {
    const accountId = randomUUID();
    const l = await grant(accountId, need(5_000n));
    const granted = l.credit!.granted;
    const forged = usage(l, accountId, { inputTokens: 100n, outputTokens: 1_000n, worstCaseMicros: granted + 1n });
    expect(await settledAs(forged)).toEqual({ over_lease_credit: 1 });
    expect(await record(forged.requestId!)).toMatchObject({ cost_micros: "0" });
    expect(await wallet(accountId)).toEqual({ posted: 10_000n, held: granted });
    // At most its grant is fine: the same event with a worst case of all the grant is charged.
    const genuine = usage(l, accountId, { inputTokens: 100n, outputTokens: 150n, worstCaseMicros: granted });
    expect(await settledAs(genuine)).toEqual({ settled: 1 });
    expect(await record(genuine.requestId!)).toMatchObject({ cost_micros: "275" });
  });

  it("charges no more than the lease still holds for its unsettled requests", async () => {
    const accountId = randomUUID();
    const l = await grant(accountId, need(5_000n));
    expect(l.credit!.granted).toBe(5_000n);
    await settle(usage(l, accountId, { inputTokens: 0n, outputTokens: 1_000_000n, worstCaseMicros: 3_000n }));
    expect(await lease(l.leaseId)).toEqual({ held: 2_000n, settled: 3_000n });
    // Within the grant, but 3,000 of it already settled: only 2,000 is still held for requests.
    const greedy = usage(l, accountId, { inputTokens: 0n, outputTokens: 1_000_000n, worstCaseMicros: 5_000n });
    expect(await settledAs(greedy)).toEqual({ clamped: 1 });
    expect(await record(greedy.requestId!)).toMatchObject({ cost_micros: "2000" });
    expect(await wallet(accountId)).toEqual({ posted: 5_000n, held: 0n });
    expect(await lease(l.leaseId)).toEqual({ held: 0n, settled: 5_000n });
    expect(await conservation(accountId)).toEqual({ heldGap: 0, badLeases: 0, moneyGap: 0 });
  });
});
