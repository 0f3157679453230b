import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import { AppError } from "@mkt/runtime/errors";
import { createClient, promiseClient } from "@mkt/runtime/grpc-client";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { BillingServiceClient } from "@mkt/proto/billing/v1/billing";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import {
  admitOnLease,
  ledgerInvariants,
  REQUEST_CHARGE_SQL,
  startTestBilling,
  type TestBilling,
} from "./billing-harness.ts";

// RecordUsage, the edge's way to hand billing the usage events JetStream did not ack in time:
// the same settlement as the stream's, so a request reaching billing both ways is charged once.
let t: TestBilling;
beforeAll(async () => {
  // Small batches, so one call spans several transactions.
  t = await startTestBilling({ SETTLE_BATCH_SIZE: "2" });
});
afterAll(async () => {
  await t?.close();
});

const tokens = { inputTokens: 100n, outputTokens: 150n }; // 275 micro-USD at the harness's prices

/** What billing holds of the request and its account: its usage record, the wallet, the ledger. */
async function books(event: UsageCompleted) {
  const records = await t.query(`select cost_micros from usage_records where request_id = $1`, [event.requestId]);
  const [wallet] = await t.query(`select posted_micros, held_micros from wallets where account_id = $1`, [
    event.accountId,
  ]);
  // The request's charge: its record in its batch's entry, whose customer leg sums its records.
  const [charged] = await t.query(REQUEST_CHARGE_SQL, [event.requestId]);
  const [debits] = await t.query(
    `select count(*)::int as n from ledger_postings where ledger_account = $1 and amount_micros < 0`,
    [`customer:${event.accountId}`],
  );
  return { records, wallet, charged: charged!.v, debits: debits!.n };
}

describe("RecordUsage", () => {
  it("settles the events before it answers, and the same events from JetStream later change nothing", async () => {
    const event = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
    await t.client.recordUsage({ events: [event] });
    const recorded = await books(event);
    expect(recorded.records).toEqual([{ cost_micros: "275" }]);
    expect(recorded.charged).toBe("275");
    expect(recorded.debits).toBe(1);
    expect(recorded.wallet).toEqual({ posted_micros: String(5_000_000 - 275), held_micros: "0" });

    await t.publishUsage(event);
    await t.waitSettled();
    await t.client.recordUsage({ events: [event] });
    expect(await books(event)).toEqual(recorded);
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("changes nothing for events JetStream delivered first", async () => {
    const event = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
    await t.publishUsage(event);
    await t.waitSettled();
    const settled = await books(event);
    expect(settled.records).toEqual([{ cost_micros: "275" }]);

    await t.client.recordUsage({ events: [event, event] });
    expect(await books(event)).toEqual(settled);
  });

  it("settles once when the call and JetStream's delivery race each other", async () => {
    const events = await Promise.all(
      Array.from({ length: 4 }, () => admitOnLease(t, { accountId: randomUUID(), ...tokens })),
    );
    await Promise.all([t.client.recordUsage({ events }), ...events.map((event) => t.publishUsage(event))]);
    await t.waitSettled();
    for (const event of events) {
      const { records, charged, debits } = await books(event);
      expect(records).toEqual([{ cost_micros: "275" }]);
      expect({ charged, debits }).toEqual({ charged: "275", debits: 1 });
    }
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("settles a call larger than one batch, of several accounts, each event once", async () => {
    const events = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        admitOnLease(t, { accountId: randomUUID(), ...tokens, latencyMs: BigInt(i) }),
      ),
    );
    await t.client.recordUsage({ events });
    const rows = await t.query<{ n: number; cost: string }>(
      `select count(*)::int as n, sum(cost_micros)::text as cost from usage_records where request_id = any($1)`,
      [events.map((e) => e.requestId)],
    );
    expect(rows).toEqual([{ n: 5, cost: String(5 * 275) }]);
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("dead-letters an event it can never record and settles the rest of the call", async () => {
    const event = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
    const nameless = { ...event, requestId: "" };
    const accountless = { ...event, requestId: newRequestId(), accountId: "not-an-account" };
    await t.client.recordUsage({ events: [event, nameless, accountless] });
    expect((await books(event)).records).toHaveLength(1);
    const rows = await t.query(
      `select request_id, subject, reason, attempts from usage_dead_letters where request_id = $1 or data = $2`,
      [accountless.requestId, Buffer.from(UsageCompleted.encode(UsageCompleted.fromPartial(nameless)).finish())],
    );
    expect(rows.sort((a, b) => String(a.reason).localeCompare(String(b.reason)))).toEqual([
      {
        request_id: accountless.requestId,
        subject: "grpc:RecordUsage",
        reason: 'account_id "not-an-account" is not a UUID',
        attempts: 1,
      },
      { request_id: null, subject: "grpc:RecordUsage", reason: "request_id is empty", attempts: 1 },
    ]);
  });

  it.each(["registry", "accounts"] as const)(
    "is refused to %s's certificate (the edge's call alone)",
    async (caller) => {
      const event = await admitOnLease(t, { accountId: randomUUID(), ...tokens });
      const client = createClient(
        BillingServiceClient,
        `127.0.0.1:${t.billing.port}`,
        (await testCertificates()).tls(caller),
      );
      try {
        const err = await promiseClient(client)
          .recordUsage({ events: [event] })
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(AppError);
        expect((err as AppError).code).toBe("forbidden");
        expect((err as AppError).message).toMatch(new RegExp(`${caller} may not call .*RecordUsage`));
      } finally {
        client.close();
      }
      expect((await books(event)).records).toEqual([]);
    },
  );
});
