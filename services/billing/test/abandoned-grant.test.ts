import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

// A grant the edge stopped waiting for (its deadline passed while billing waited on a lock) must
// not commit: the edge would never learn of the lease, which would then hold the account's credit
// and slots for as long as the edge's session lives.

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

it("rolls back a grant whose caller's deadline passed while it waited, and holds nothing", async () => {
  const accountId = randomUUID();
  let sequence = 0n;
  const grant = (edgeId: string, timeoutMs: number) =>
    t.client.grantLease(
      {
        edgeId,
        incarnation: 0n,
        bootId: "boot",
        sequence: ++sequence,
        accountId,
        tier: "free",
        minCreditMicros: 0n,
        request: { creditMicros: 1_000n, requests: 1n, tokens: 0n, subscriptionId: "", keyId: "" },
      },
      { timeoutMs },
    );
  // The account's wallet exists (a first grant, on another edge, opens it), and its lease holds 1,000.
  await grant(`edge-${randomUUID()}`, 5_000);
  const held = async () =>
    (await t.query<{ v: string }>(`select held_micros::text as v from wallets where account_id = $1`, [accountId]))[0]!
      .v;
  expect(await held()).toBe("1000");

  // Another transaction holds the wallet's row lock past this edge's grant's 300 ms deadline.
  const edgeId = `edge-${randomUUID()}`;
  const locker = new pg.Client({ connectionString: t.config.DATABASE_URL, options: "-c search_path=billing" });
  await locker.connect();
  try {
    await locker.query("begin");
    await locker.query("select 1 from wallets where account_id = $1 for update", [accountId]);
    const sent = Date.now();
    const late = grant(edgeId, 300);
    late.catch(() => undefined);
    await expect(late).rejects.toThrow();
    // Given up at its deadline, while billing still waits on the lock.
    expect(Date.now() - sent).toBeLessThan(2_000);
    await sleep(200);
    await locker.query("commit");
  } finally {
    await locker.end();
  }
  // The grant went on once the lock was free, and rolled back: no lease, its credit not held.
  await sleep(500);
  const [made] = await t.query<{ n: number }>(`select count(*)::int as n from leases where edge_id = $1`, [edgeId]);
  expect({ leases: made!.n, held: await held() }).toEqual({ leases: 0, held: "1000" });
});
