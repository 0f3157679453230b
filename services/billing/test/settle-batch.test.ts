import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newRequestId } from "@mkt/runtime/ids";
import type { Orm } from "@mkt/runtime/db";
import { createLogger } from "@mkt/runtime/logger";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { settleUsageBatch } from "../src/settlement/settle-batch.ts";
import {
  admitOnLease,
  ledgerInvariants,
  startTestBilling,
  type LeaseUsage,
  type TestBilling,
  openTestOrm,
} from "./billing-harness.ts";

// The consumer decides how events group into batches; to test one batch with every kind of
// event in it, this file calls the batch settlement directly on billing's real database.
let t: TestBilling;
let orm: Orm;
const log = createLogger("settle-batch-test", "silent");
beforeAll(async () => {
  t = await startTestBilling();
  orm = await openTestOrm(t, log);
});
afterAll(async () => {
  await orm?.close();
  await t?.close();
});

/** A request admitted on its own lease with a 350 micro-USD worst case; its event for given tokens. */
async function admitted(usage: LeaseUsage) {
  const event = await admitOnLease(t, { worstCaseMicros: 350n, latencyMs: 100n, ...usage });
  return (tokens: { inputTokens: bigint; outputTokens: bigint }) => UsageCompleted.fromPartial({ ...event, ...tokens });
}

const settle = (events: UsageCompleted[]) =>
  orm.em.fork().transactional((em) => settleUsageBatch(em, events, log, new Date()));

describe("batch settlement", () => {
  it("settles a mixed batch on its leases, each request once, and a replay of it changes nothing", async () => {
    const accountId = randomUUID();
    const plain = await admitted({ accountId });
    const greedy = await admitted({ accountId });
    const hosted = await admitted({
      accountId,
      provider: "hoster",
      hosterId: "hoster-7",
      inputPricePer1mMicros: 1_000_000n,
      outputPricePer1mMicros: 2_000_000n,
      worstCaseMicros: 1_000n,
    });
    // A second account's request in the same batch: its wallet is locked with the first's.
    const other = await admitted({ accountId: randomUUID() });
    const tokens = { inputTokens: 100n, outputTokens: 150n };
    const batch = [
      plain(tokens),
      plain(tokens), // the same request again, under another message id
      greedy({ inputTokens: 100n, outputTokens: 1_000_000n }), // reports more than its worst case
      hosted(tokens),
      // No lease id: no edge sends one; recorded at no cost.
      UsageCompleted.fromPartial({ requestId: newRequestId(), accountId, success: true, ...tokens }),
      other(tokens),
    ];

    expect(await settle(batch)).toEqual(["settled", "duplicate", "settled", "settled", "no_hold", "settled"]);
    const costs = await t.query(
      `select cost_micros, platform_fee_micros, hoster_earned_micros from usage_records
       where account_id = $1 order by created_at, cost_micros`,
      [accountId],
    );
    // 275 = ceil(100 × 0.5 + 150 × 1.5); the greedy one is clamped to its 350 worst case; the
    // hosted one costs ceil(100 × 1 + 150 × 2) = 400, split 80 / 320.
    expect(costs.map((c) => Object.values(c).join("/")).sort()).toEqual(
      ["0/0/0", "275/275/0", "350/350/0", "400/80/320"].sort(),
    );
    // The batch queued its rollup deltas; the fold adds them to the hourly rollup.
    await t.billing.foldRollups();
    const [hourly] = await t.query(
      `select sum(requests)::text as requests, sum(cost_micros)::text as cost from usage_hourly where account_id = $1`,
      [accountId],
    );
    expect(hourly).toEqual({ requests: "4", cost: String(275 + 350 + 400) });

    expect(await settle(batch)).toEqual(["duplicate", "duplicate", "duplicate", "duplicate", "duplicate", "duplicate"]);
    const [wallet] = await t.query(`select posted_micros, held_micros from wallets where account_id = $1`, [accountId]);
    // Each lease's hold is released by its request's worst case: nothing of it stays held.
    expect(wallet).toEqual({ posted_micros: String(5_000_000 - 275 - 350 - 400), held_micros: "0" });
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });
});
