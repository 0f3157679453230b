import { randomUUID } from "node:crypto";
import pg from "pg";
import { v7 as uuidV7 } from "uuid";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { LeaseResource, LeaseStatus, type LeaseNeed } from "@mkt/proto/billing/v1/leases";
import { startTestBilling, type TestBilling } from "./billing-harness.ts";

const TTL = 2_000;
// A fixed clock 10 s into a UTC minute, inside the subscriptions' period.
const BASE = Date.UTC(2030, 0, 7, 12, 0, 10);
let t: TestBilling;

beforeAll(async () => {
  t = await startTestBilling(
    {
      LEASE_TTL_MS: String(TTL),
      STARTING_CREDIT_USD: "0.01",
      TIERS: JSON.stringify({ free: { limit_per_minute: 1000, limit_per_day: 100000 } }),
    },
    // The closer never runs here: whatever is released, an incarnation released.
    { clock: () => new Date(BASE) },
  );
});
afterAll(async () => {
  await t?.close();
});

/** One process of an edge: its stable id, its boot id, and the incarnation billing gave it. */
function edgeProcess(edgeId = `edge-${randomUUID()}`) {
  let sequence = 0n;
  let incarnation = 0n;
  const caller = () => ({ edgeId, incarnation, bootId: edge.bootId, sequence: ++sequence });
  const learn = <R extends { incarnation: bigint }>(reply: R) => {
    if (incarnation === 0n) incarnation = reply.incarnation;
    return reply;
  };
  const edge = {
    edgeId,
    bootId: randomUUID() as string,
    grant: async (accountId: string, request: LeaseNeed) =>
      learn(await t.client.grantLease({ ...caller(), accountId, tier: "free", minCreditMicros: 0n, request })),
    heartbeat: async () => learn(await t.client.heartbeat({ ...caller(), leases: [], unansweredGrantAccounts: [] })),
    returnLeases: async (leaseId: string) =>
      learn(
        await t.client.returnLeases({
          ...caller(),
          leases: [{ leaseId, admitted: [], final: true, budgetDemand: [], slotsPinned: true, nextWindow: false }],
        }),
      ),
  };
  return edge;
}

const need = (credit: bigint, subscriptionId = "", requests = 1n): LeaseNeed => ({
  creditMicros: credit,
  requests,
  tokens: subscriptionId ? 100n : 0n,
  subscriptionId,
  keyId: "",
});

/** An active subscription allowing `concurrent` requests at a time. */
async function subscription(concurrent: number) {
  const accountId = randomUUID();
  const id = randomUUID();
  await t.query(
    `insert into subscriptions (id, account_id, idempotency_key, product_id, status, hoster_id, pricing_model,
       included_tokens, rpm_limit, tpm_limit, max_concurrent, max_output_tokens, max_context_tokens,
       period_index, period_start, period_end, activated_at, created_at)
     values ($1, $2, 'k', $3, 'active', $4, 'free', 0, 600, 1000000, $5, 4096, 8192, 0, $6, $7, $6, $6)`,
    [id, accountId, randomUUID(), randomUUID(), concurrent, new Date(BASE - 86_400_000), new Date(BASE + 86_400_000)],
  );
  return { accountId, id };
}

async function held(accountId: string): Promise<bigint> {
  const [row] = await t.query<{ held: string }>(`select held_micros as held from wallets where account_id = $1`, [
    accountId,
  ]);
  return BigInt(row!.held);
}

const errorCode = (err: unknown) => AppError.fromGrpc(err).code;

describe("edge incarnations", () => {
  it("a restarted edge's first call closes its previous process's leases and releases their slots and credit", async () => {
    const sub = await subscription(3);
    const payg = randomUUID();
    const dead = edgeProcess();
    // The process that is about to die holds all three slots and some credit.
    const slots = (await dead.grant(sub.accountId, need(0n, sub.id, 3n))).lease!;
    expect(slots.budgets[0]!.rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_SLOTS)?.granted).toBe(3n);
    const credit = (await dead.grant(payg, need(4_000n))).lease!;
    expect(await held(payg)).toBeGreaterThanOrEqual(4_000n);
    // Meanwhile another edge cannot take a slot: they are all lent to the dead process.
    const other = edgeProcess();
    await expect(other.grant(sub.accountId, need(0n, sub.id))).rejects.toSatisfy(
      (err) => errorCode(err) === "concurrency_limit_exceeded",
    );

    // The edge starts again under the same id: its first call (the heartbeat it sends at start).
    const restarted = edgeProcess(dead.edgeId);
    const first = await restarted.heartbeat();
    expect(first.incarnation).toBeGreaterThan(0n);
    expect(first.leases).toEqual([]);
    // Released when that call answered, not at a deadline: nothing is held, every slot is free.
    expect(await held(payg)).toBe(0n);
    const rows = await t.query<{ status: string; released: boolean }>(
      `select status, released_at is not null as released from leases where id in ($1, $2)`,
      [slots.leaseId, credit.leaseId],
    );
    expect(rows).toEqual([
      { status: "closed", released: true },
      { status: "closed", released: true },
    ]);
    const taken = (await other.grant(sub.accountId, need(0n, sub.id, 3n))).lease!;
    expect(taken.budgets[0]!.rooms.find((r) => r.resource === LeaseResource.LEASE_RESOURCE_SLOTS)?.granted).toBe(3n);
    // And the new incarnation is served as any edge is.
    expect((await restarted.grant(payg, need(1_000n))).lease!.status).toBe(LeaseStatus.LEASE_STATUS_OPEN);
  });

  it("refuses every call of an older incarnation with edge_superseded", async () => {
    const old = edgeProcess();
    const accountId = randomUUID();
    const lease = (await old.grant(accountId, need(1_000n))).lease!;
    const next = edgeProcess(old.edgeId);
    await next.heartbeat();

    const refused = (call: Promise<unknown>) =>
      expect(call).rejects.toSatisfy((err) => errorCode(err) === "edge_superseded");
    await refused(old.heartbeat());
    await refused(old.grant(accountId, need(1_000n)));
    await refused(old.returnLeases(lease.leaseId));
    // Nothing the old process asked for was granted.
    const [open] = await t.query<{ n: string }>(
      `select count(*) as n from leases where edge_id = $1 and status <> 'closed'`,
      [old.edgeId],
    );
    expect(open!.n).toBe("0");
    expect(await held(accountId)).toBe(0n);
  });

  it("never lets a process's late first call take the id from a process started after it", async () => {
    // Boot ids are UUIDv7s minted at start: the earlier process started 5 s before the later one.
    const earlier = edgeProcess();
    earlier.bootId = uuidV7({ msecs: BASE - 5_000 });
    const later = edgeProcess(earlier.edgeId);
    later.bootId = uuidV7({ msecs: BASE });
    const accountId = randomUUID();
    const { incarnation } = await later.grant(accountId, need(1_000n));
    // The earlier process's first call (sent before it died, or held up) arrives only now.
    await expect(earlier.heartbeat()).rejects.toSatisfy((err) => errorCode(err) === "edge_superseded");
    // The later process keeps the id, its incarnation and its lease.
    expect((await later.heartbeat()).incarnation).toBe(incarnation);
    expect(await held(accountId)).toBe(1_000n);
    // A process started after it still takes the id, as every restart does.
    const next = edgeProcess(earlier.edgeId);
    next.bootId = uuidV7({ msecs: BASE + 5_000 });
    expect((await next.heartbeat()).incarnation).toBe(incarnation + 1n);
    expect(await held(accountId)).toBe(0n);
  });

  it("a call waits for an incarnation being started and is refused once it commits", async () => {
    const old = edgeProcess();
    const accountId = randomUUID();
    await old.grant(accountId, need(1_000n));
    // What startIncarnation does, held open: the edge's incarnation lock, then the new incarnation.
    const starting = new pg.Client({ connectionString: t.config.DATABASE_URL, options: "-c search_path=billing" });
    await starting.connect();
    try {
      await starting.query("begin");
      await starting.query("select lock_edge_incarnation($1)", [old.edgeId]);
      await starting.query(
        `update edge_sessions set incarnation = incarnation + 1, boot_id = 'next' where edge_id = $1`,
        [old.edgeId],
      );
      // The grant reads the live session without a lock (its deadline is far enough), then waits here.
      let settled = false;
      const grant = old.grant(accountId, need(1_000n)).finally(() => (settled = true));
      grant.catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(settled).toBe(false);
      await starting.query("commit");
      await expect(grant).rejects.toSatisfy((err) => errorCode(err) === "edge_superseded");
    } finally {
      await starting.end();
    }
    // Only the first grant's credit is held: the refused one took nothing.
    expect(await held(accountId)).toBe(1_000n);
  });

  it("the first calls of one process in flight at once share one incarnation", async () => {
    const previous = edgeProcess();
    await previous.heartbeat();
    const starting = edgeProcess(previous.edgeId);
    const accounts = Array.from({ length: 4 }, () => randomUUID());
    const replies = await Promise.all([
      starting.heartbeat(),
      ...accounts.map((accountId) => starting.grant(accountId, need(1_000n))),
    ]);
    const incarnations = new Set(replies.map((reply) => reply.incarnation));
    expect(incarnations.size).toBe(1);
    const [incarnation] = incarnations;
    expect(incarnation).toBeGreaterThan(0n);
    // No second incarnation closed what the first granted: every grant's lease is open and holds its credit.
    const [session] = await t.query<{ incarnation: string }>(
      `select incarnation from edge_sessions where edge_id = $1`,
      [starting.edgeId],
    );
    expect(BigInt(session!.incarnation)).toBe(incarnation);
    for (const accountId of accounts) expect(await held(accountId)).toBeGreaterThanOrEqual(1_000n);
    const statuses = await t.query<{ status: string }>(`select distinct status from leases where edge_id = $1`, [
      starting.edgeId,
    ]);
    expect(statuses).toEqual([{ status: "open" }]);
  });
});
