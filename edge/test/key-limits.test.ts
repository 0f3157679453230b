import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { newRequestId } from "@mkt/runtime/ids";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import type { ServiceTls } from "@mkt/runtime/service-tls";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { AppError } from "@mkt/runtime/errors";
import { createLogger } from "@mkt/runtime/logger";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { startTestBilling, type TestBilling } from "../../services/billing/test/billing-harness.ts";
import { LeaseTable } from "../src/leases/lease-table.ts";
import { followLeaseRecalls } from "../src/leases/lease-recall.ts";

// A key's spend limit enforced through the account's leases
// (docs/adr/0020-key-spend-limits-in-billing.md): real billing, two real edge lease tables, 64
// concurrent clients, billing's clock moved by the test.
const TTL = 2_000;
const DAY = 86_400_000;
const LIMIT = 10_000n; // 0.01 USD
const WORST_CASE = 1_500n; // each request's worst case: 1,500 output tokens at $1 per 1M
const COST = 1_000n; // what each one is then charged: 1,000 output tokens
const CLIENTS = 64;
const log = createLogger("key-limits-test", "silent");

let clock = Date.UTC(2030, 0, 7, 12, 0, 10);
let t: TestBilling;
let edgeTls: ServiceTls;
let nc: NatsConnection;
const closers: Array<() => void> = [];

function edge(): LeaseTable {
  const client = createClient(BillingServiceClient, `127.0.0.1:${t.billing.port}`, edgeTls);
  const table = new LeaseTable({ edgeId: `edge-${randomUUID()}`, billing: promiseClient(client), ttlMs: TTL, log });
  closers.push(() => client.close(), followLeaseRecalls(nc, t.names.leaseRecall(table.edgeId), table, log));
  return table;
}

beforeAll(async () => {
  edgeTls = (await testCertificates()).tls("edge");
  // Credit and the tier's request limits are plenty: only the key's limit refuses here.
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      MAX_REQUEST_MS: "60000",
      STARTING_CREDIT_USD: "5",
      TIERS: JSON.stringify({ free: { limit_per_minute: 100_000, limit_per_day: 1_000_000 } }),
    },
    { clock: () => new Date(clock) },
  );
  nc = await connect({ servers: TEST_NATS_URL });
});
afterAll(async () => {
  for (const close of closers) close();
  await nc?.drain();
  await t?.close();
});

/** Settled spend of the key plus what every unreleased lease still holds of its room. */
async function committed(keyId: string): Promise<bigint> {
  const [row] = await t.query<{ v: string }>(
    `select (coalesce((select sum(spent_micros) from key_daily_spend where key_id = $1), 0)
       + coalesce((select sum(greatest(0, case when l.status = 'closed' then a.admitted else a.granted end - a.settled))
          from lease_allowances a join leases l on l.id = a.lease_id
          where a.scope = $1::text and a.resource = 'key_credit' and l.released_at is null), 0))::text as v`,
    [keyId],
  );
  return BigInt(row!.v);
}

type Outcome = { admitted: true } | { admitted: false; error: AppError };

/** One client's request: admitted on its edge's lease with its worst case, then settled by registry's event. */
async function request(table: LeaseTable, accountId: string, keyId: string): Promise<Outcome> {
  const worstCase = { credit: WORST_CASE, tokens: WORST_CASE, maxOutputTokens: WORST_CASE };
  try {
    const ticket = await table.admit({ accountId, tier: "free", keyId, atLeast: { credit: WORST_CASE, tokens: 0n } });
    try {
      await table.takeWorstCase(ticket, worstCase);
    } finally {
      table.release(ticket);
    }
    await t.publishUsage({
      requestId: newRequestId(),
      accountId,
      keyId,
      modelId: "demo-small",
      provider: "local",
      outputTokens: COST,
      outputPricePer1mMicros: 1_000_000n,
      worstCaseMicros: ticket.worstCaseMicros,
      worstCaseTokens: ticket.worstCaseTokens,
      leaseId: ticket.lease.leaseId,
      success: true,
      startedAt: new Date(clock).toISOString(),
    });
    return { admitted: true };
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return { admitted: false, error: err };
  }
}

describe("a key's spend limit", () => {
  it("of 0.01 USD under 64 concurrent clients over two edges never passes the limit, and the window reset restores it", async () => {
    const accountId = randomUUID();
    const keyId = randomUUID();
    const other = randomUUID();
    const edges = [edge(), edge()];
    const { limit } = await t.client.setKeyLimit({
      accountId,
      keyId,
      limitMicros: LIMIT,
      limitReset: "daily",
    });
    expect(limit).toMatchObject({ keyId, limitMicros: LIMIT, limitReset: "daily", spentMicros: 0n });
    expect(limit!.resetsAt).toBe("2030-01-08T00:00:00+00:00");

    let highest = 0n;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const now = await committed(keyId);
        if (now > highest) highest = now;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();

    // Rounds of 64 concurrent clients, half on each edge, until two rounds in a row admit nothing.
    let admitted = 0;
    const refusals: AppError[] = [];
    for (let round = 0, idle = 0; round < 20 && idle < 2; round++) {
      const outcomes = await Promise.all(
        Array.from({ length: CLIENTS }, (_, i) => request(edges[i % 2]!, accountId, keyId)),
      );
      const now = outcomes.filter((o) => o.admitted).length;
      admitted += now;
      for (const o of outcomes) if (!o.admitted) refusals.push(o.error);
      await t.waitSettled();
      for (const table of edges) await table.beat();
      idle = now === 0 ? idle + 1 : 0;
    }
    watching = false;
    await watcher;

    // Settled spend plus every unsettled worst case never passed 0.01 USD, at any moment.
    expect(highest).toBeLessThanOrEqual(LIMIT);
    expect(admitted).toBeGreaterThan(0);
    expect(BigInt(admitted) * COST).toBeLessThanOrEqual(LIMIT);
    // And no room was lost on the way: the limit was used until less than one worst case was left
    // (room an edge held unused was recalled for the other).
    expect(LIMIT - BigInt(admitted) * COST).toBeLessThan(WORST_CASE);
    const [spent] = await t.query<{ v: string }>(
      `select coalesce(sum(spent_micros), 0)::text as v from key_daily_spend where key_id = $1`,
      [keyId],
    );
    expect(BigInt(spent!.v)).toBe(BigInt(admitted) * COST);
    expect(refusals.length).toBeGreaterThan(0);
    for (const error of refusals) {
      expect(error.httpStatus).toBe(402);
      expect(error.code).toBe("key_limit_exceeded");
      expect(error.message).toMatch(/spend limit of \$0\.01 per day .* resets at 2030-01-08T00:00:00\+00:00/);
    }
    const { limits } = await t.client.listKeyLimits({ accountId, keyIds: [keyId] });
    expect(limits[0]).toMatchObject({ spentMicros: BigInt(admitted) * COST });

    // Another key of the account is not limited by this one's.
    expect(await request(edges[0]!, accountId, other)).toEqual({ admitted: true });

    // The next UTC day (billing's clock): the window resets, and both edges admit the key again
    // (a heartbeat reply lifts an edge's cached refusal, as after a top-up).
    clock += DAY;
    for (const table of edges) await table.beat();
    for (const table of edges) expect(await request(table, accountId, keyId)).toEqual({ admitted: true });
    await t.waitSettled();
    const { limits: next } = await t.client.listKeyLimits({ accountId, keyIds: [keyId] });
    expect(next[0]).toMatchObject({ spentMicros: 2n * COST, resetsAt: "2030-01-09T00:00:00+00:00" });
  }, 60_000);
});
