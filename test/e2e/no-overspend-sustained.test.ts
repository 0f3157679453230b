import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { ledgerInvariants } from "../../services/billing/test/billing-harness.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { DEMO_PRICES, signUp, startSystem, type RunningSystem } from "./system.ts";

/*
 * No overspend on N edges (docs/architecture.md#no-overspend-on-any-number-of-edges): two edges,
 * one account with 0.01 USD, 64 concurrent clients split over both for 20 s. The balance never goes
 * below zero; once the load stops and the leases are returned or expired, conservation is exact.
 *
 * The numbers. 0.01 USD = 10,000 micro-USD, the starting grant. Each request asks for
 * max_tokens = 500 and the demo model always writes 500 tokens at 5,000 tokens/s (0.1 s), so
 * each admitted request holds ≈ 500 × 1.50 + prompt × 0.50 ≈ 760 micro-USD: about 13 requests
 * per 0.01 USD. 64 clients spend that in the first fraction of a second and are refused (402)
 * from then on, until an administrator tops the account up by another 0.01 USD, every 3 s: the
 * credit runs out and comes back five times, and the last 5 s are refusals only. Leases live 1 s,
 * so they are renewed, grown, recalled and closed idle all along.
 */
const TTL_MS = "1000";
const GRANT_MICROS = 10_000n;
const TOP_UP_USD = 0.01;
const TOP_UP_MICROS = 10_000n;
const MAX_TOKENS = 500;
const CLIENTS = 64;
const LOAD_MS = 20_000;
const TOP_UP_EVERY_MS = 3_000;
const TOP_UPS = 5; // at 3, 6, 9, 12 and 15 s

let system: RunningSystem;
let db: BillingDb;
beforeAll(async () => {
  system = await startSystem({
    edges: 2,
    billing: {
      LEASE_TTL_MS: TTL_MS,
      STARTING_CREDIT_USD: "0.01",
      // Neither rate window may be what refuses requests here: this test is about credit.
      TIERS: JSON.stringify({ free: { limit_per_minute: 10_000_000, limit_per_day: 100_000_000 } }),
    },
    // Idle leases close after 2 TTL (not the default minute): nothing held once the load stops.
    edge: { LEASE_IDLE_MS: String(2 * Number(TTL_MS)) },
    model: { DEMO_COMPLETION_TOKENS: String(MAX_TOKENS), DEMO_TOKENS_PER_SECOND: "5000" },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
});

/** What one client saw of one request, read to its end. */
interface Seen {
  /** Which edge answered (0 or 1). */
  edge: number;
  /** Milliseconds since the load started when the answer's head came (admitted or refused by then). */
  at: number;
  status: number;
  requestId: string;
  code?: string;
  message?: string;
  usage?: { prompt_tokens: number; completion_tokens: number };
}

async function ask(edge: number, apiKey: string, stream: boolean, text: string, since: () => number): Promise<Seen> {
  const res = await postChat(system.urls[edge]!, apiKey, {
    model: "demo-small",
    max_tokens: MAX_TOKENS,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    messages: [{ role: "user", content: text }],
  });
  const seen: Seen = { edge, at: since(), status: res.status, requestId: res.headers.get("x-request-id") ?? "" };
  const body = await res.text();
  if (res.status !== 200) {
    const { error } = JSON.parse(body) as { error: { code: string; message: string } };
    return { ...seen, code: error.code, message: error.message };
  }
  if (!stream) return { ...seen, usage: (JSON.parse(body) as { usage: Seen["usage"] }).usage };
  const usageLine = body.split("\n").find((line) => line.includes('"usage":{'));
  return {
    ...seen,
    usage: usageLine ? (JSON.parse(usageLine.slice("data: ".length)) as { usage: Seen["usage"] }).usage : undefined,
  };
}

describe("64 clients on two edges for 20 s against 0.01 USD, topped up while they run", () => {
  it("never takes the balance below zero, and conserves every micro-dollar once quiet", async () => {
    const { apiKey, accountId } = await signUp(system.url);
    expect(system.urls).toHaveLength(2);

    const wallet = async () => {
      const [w] = await db.query<{ posted: string; held: string }>(
        `select posted_micros::text as posted, held_micros::text as held from wallets where account_id = $1`,
        [accountId],
      );
      return { posted: BigInt(w!.posted), held: BigInt(w!.held) };
    };

    // Watch the wallet the whole time: neither the posted nor the spendable balance may ever be
    // negative, at any moment another transaction can see.
    let lowestPosted = GRANT_MICROS;
    let lowestSpendable = GRANT_MICROS;
    let polls = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const { posted, held } = await wallet();
        polls += 1;
        if (posted < lowestPosted) lowestPosted = posted;
        if (posted - held < lowestSpendable) lowestSpendable = posted - held;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const stopWatching = async () => {
      watching = false;
      await watcher;
    };
    // Also when an assertion fails, before the database closes.
    onTestFinished(stopWatching);

    const start = Date.now();
    const since = () => Date.now() - start;

    // An administrator tops the account up every 3 s while the clients run.
    const topUps: number[] = [];
    const topUpAnswers: string[] = [];
    const admin = (async () => {
      for (let n = 1; n <= TOP_UPS; n++) {
        await new Promise((resolve) => setTimeout(resolve, start + n * TOP_UP_EVERY_MS - Date.now()));
        // When it was asked for: no request can be paid from it before then.
        topUps.push(since());
        const res = await fetch(`${system.url}/admin/accounts/${accountId}/credits`, {
          method: "POST",
          headers: { authorization: `Bearer ${system.adminToken}`, "content-type": "application/json" },
          body: JSON.stringify({ amount_usd: TOP_UP_USD }),
        });
        topUpAnswers.push(`${res.status} ${res.status === 200 ? "" : await res.text()}`.trim());
      }
    })();

    // 64 clients, half on each edge, half of each streaming, each sending its next request as
    // soon as the last one ended, for 20 s.
    const seen: Seen[] = [];
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, client) => {
        for (let i = 0; since() < LOAD_MS; i++) {
          seen.push(await ask(client % 2, apiKey, client % 4 < 2, `client ${client} request ${i}`, since));
        }
      }),
    );
    await admin;
    // Every top-up is credited, even while the account is under load on both edges.
    expect(topUpAnswers).toEqual(Array.from({ length: TOP_UPS }, () => "200"));

    const served = seen.filter((s) => s.status === 200);
    const refused = seen.filter((s) => s.status !== 200);
    // Every refusal is for credit, with the balance and the need in its message.
    const otherRefusals = refused.filter((r) => r.status !== 402 || r.code !== "insufficient_credits");
    expect(
      otherRefusals.slice(0, 5).map((r) => `${r.status} ${r.code} at ${r.at} ms: ${r.message}`),
      `${otherRefusals.length} refusals other than 402 insufficient_credits`,
    ).toEqual([]);
    for (const r of refused) expect(r.message).toMatch(/your balance is \$[\d.]+ and this request needs \$[\d.]+/);

    // Both edges admitted on the account's credit.
    const servedBy = [0, 1].map((edge) => served.filter((s) => s.edge === edge).length);
    expect(Math.min(...servedBy), `served by each edge: ${servedBy.join(", ")}`).toBeGreaterThan(0);

    // The credit ran out and came back: between one top-up and the next, requests were admitted
    // (by when their answers' heads came back) and then refused again. A top-up reaches an edge
    // that refused the account with its next heartbeat reply (docs/leases.md), well within 3 s.
    const phases = [0, ...topUps, LOAD_MS];
    for (let p = 0; p + 1 < phases.length; p++) {
      const inPhase = (s: Seen) => s.at >= phases[p]! && s.at < phases[p + 1]!;
      const quoted = new Set(refused.filter(inPhase).map((r) => /balance is (\$[\d.]+)/.exec(r.message ?? "")?.[1]));
      const phase = `from ${phases[p]} to ${phases[p + 1]} ms (refusals quoted balances ${[...quoted].join(", ")})`;
      expect(served.filter(inPhase).length, `served ${phase}`).toBeGreaterThan(0);
      expect(refused.filter(inPhase).length, `refused ${phase}`).toBeGreaterThan(0);
    }

    // Every answer settles: one usage record per 200, and none for a refusal.
    const usageRows = () =>
      db.figure(`select count(*)::text as v from usage_records where account_id = $1`, [accountId]);
    await expect.poll(usageRows, { timeout: 30_000 }).toBeGreaterThanOrEqual(BigInt(served.length));
    // Once the load stops, the edges return their leases or let them lapse, and billing closes
    // them: nothing stays held and no lease is left open or fenced.
    const openLeases = () =>
      db.figure(`select count(*)::text as v from leases where account_id = $1 and status <> 'closed'`, [accountId]);
    await expect.poll(async () => (await wallet()).held, { timeout: 30_000 }).toBe(0n);
    await expect.poll(openLeases, { timeout: 30_000 }).toBe(0n);
    // ... and both edges did hold leases for the account on the way.
    expect(
      await db.figure(`select count(distinct edge_id)::text as v from leases where account_id = $1`, [accountId]),
    ).toBe(2n);
    await stopWatching();
    expect(await usageRows()).toBe(BigInt(served.length));
    expect(
      await db.figure(`select coalesce(sum(held_micros), 0)::text as v from leases where account_id = $1`, [accountId]),
    ).toBe(0n);

    // What each client was told it used is what it was charged, request by request.
    const rows = await db.query<{ request_id: string; success: boolean; cost_micros: string }>(
      `select request_id::text, success, cost_micros::text from usage_records where account_id = $1`,
      [accountId],
    );
    const byRequest = new Map(rows.map((r) => [r.request_id, r]));
    const mismatched = served.flatMap((s) => {
      const row = byRequest.get(s.requestId);
      const cost = s.usage
        ? costMicros(
            BigInt(s.usage.prompt_tokens),
            BigInt(s.usage.completion_tokens),
            DEMO_PRICES.input,
            DEMO_PRICES.output,
          )
        : undefined;
      return row?.success === true && cost !== undefined && row.cost_micros === String(cost)
        ? []
        : [`${s.requestId}: ${JSON.stringify(row)} vs ${cost}`];
    });
    expect(mismatched).toEqual([]);

    // Never below zero, at any moment the watcher saw.
    expect(polls).toBeGreaterThan(100);
    expect(lowestPosted).toBeGreaterThanOrEqual(0n);
    expect(lowestSpendable).toBeGreaterThanOrEqual(0n);

    // Conservation, from the ledger: grants + top-ups − usage = the balance, nothing written off
    // (a write-off is credit spent that was not there), and the usage postings are the records.
    const postings = (...kinds: string[]) =>
      db.figure(
        `select coalesce(sum(p.amount_micros), 0)::text as v from ledger_postings p
           join journal_entries e on e.id = p.entry_id
          where e.kind = any($1) and p.ledger_account = $2`,
        [kinds, `customer:${accountId}`],
      );
    const granted = await postings("grant");
    const toppedUp = await postings("top_up");
    // A settled batch's customer leg is what was charged less what was written off: both count.
    const writtenOff =
      (await postings("write_off")) +
      (await db.figure(
        `select coalesce(sum(write_off_micros), 0)::text as v from usage_records where account_id = $1`,
        [accountId],
      ));
    const used = -(await postings("usage", "usage_batch")) + writtenOff;
    const charged = await db.figure(
      `select coalesce(sum(cost_micros), 0)::text as v from usage_records where account_id = $1`,
      [accountId],
    );
    const { posted } = await wallet();
    expect({ granted, toppedUp, writtenOff }).toEqual({
      granted: GRANT_MICROS,
      toppedUp: TOP_UP_MICROS * BigInt(TOP_UPS),
      writtenOff: 0n,
    });
    expect(used).toBe(charged);
    expect(granted + toppedUp - used - posted).toBe(0n);
    expect(await ledgerInvariants(db)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });

    // The balance, not luck, decided: the credit was spent down to less than two requests' worth.
    const perRequest = costMicros(1n, BigInt(MAX_TOKENS), DEMO_PRICES.input, DEMO_PRICES.output);
    expect(posted).toBeLessThan(perRequest * 2n);

    console.info(
      `sustained no-overspend: ${seen.length} requests, ${served.length} served (${servedBy.join(" + ")} by edge), ` +
        `${refused.length} refused; ` +
        `charged ${charged} of ${granted + toppedUp} micro-USD, ${posted} left; lowest posted ${lowestPosted}, ` +
        `lowest spendable ${lowestSpendable} over ${polls} polls; top-ups at ${topUps.join(", ")} ms`,
    );
  }, 120_000);
});
