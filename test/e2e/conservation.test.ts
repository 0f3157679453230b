import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { ledgerInvariants } from "../../services/billing/test/billing-harness.ts";
import { reconcile } from "../../services/billing/src/wallets/reconciliation.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { DEMO_PRICES, signUp, startSystem, type RunningSystem } from "./system.ts";

const GRANT_MICROS = 10_000n; // STARTING_CREDIT_USD below
/** Enough to hold ≈ 6,010 micro-USD: while one such request runs, a second cannot be paid. */
const BIG_MAX_TOKENS = 4000;

let system: RunningSystem;
let db: BillingDb;
beforeAll(async () => {
  system = await startSystem({
    edges: 2,
    billing: {
      STARTING_CREDIT_USD: "0.01",
      TIERS: JSON.stringify({ free: { limit_per_minute: 1000, limit_per_day: 10_000 } }),
    },
    registry: {
      // A second platform model whose upstream does not know it: every call fails before the
      // first byte with upstream_error, as a broken model server would.
      LOCAL_MODELS: JSON.stringify([
        {
          model_id: "demo-small",
          context_window: 8192,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
        },
        {
          model_id: "demo-broken",
          upstream_model: "no-such-model",
          context_window: 8192,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
        },
      ]),
    },
    // 100-token answers at 20 tokens/s: 5 s, long enough to act while one is streaming even on a
    // busy machine (a cold admission on the other edge recalls the first edge's lease first).
    model: { DEMO_COMPLETION_TOKENS: "100", DEMO_TOKENS_PER_SECOND: "20" },
    // Idle leases close after 2 TTL (the system's TTL is 10 s), not the default minute: the test
    // waits for nothing to stay held. idle-leases.test.ts checks the shown balance with the default.
    edge: { LEASE_IDLE_MS: "20000" },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
});

/** What the client saw of one request, by the edge's x-request-id (= billing's request_id). */
interface Seen {
  requestId: string;
  kind: "success" | "streamed" | "cancelled" | "upstream_failure" | "refused";
  status: number;
  /** Token counts the client was told (non-streaming, or streaming with include_usage). */
  usage?: { prompt_tokens: number; completion_tokens: number };
}

const messages = (text: string) => [{ role: "user", content: text }];

async function success(url: string, apiKey: string, i: number): Promise<Seen> {
  const res = await postChat(url, apiKey, { model: "demo-small", max_tokens: 10, messages: messages(`ok ${i}`) });
  const body = (await res.json()) as { usage: Seen["usage"] };
  return { requestId: res.headers.get("x-request-id")!, kind: "success", status: res.status, usage: body.usage };
}

async function streamed(url: string, apiKey: string, i: number): Promise<Seen> {
  const res = await postChat(url, apiKey, {
    model: "demo-small",
    max_tokens: 10,
    stream: true,
    stream_options: { include_usage: true },
    messages: messages(`stream ${i}`),
  });
  const text = await res.text();
  const usageLine = text.split("\n").find((line) => line.includes('"usage":{'));
  const usage = usageLine
    ? (JSON.parse(usageLine.slice("data: ".length)) as { usage: Seen["usage"] }).usage
    : undefined;
  return { requestId: res.headers.get("x-request-id")!, kind: "streamed", status: res.status, usage };
}

async function upstreamFailure(url: string, apiKey: string): Promise<Seen> {
  const res = await postChat(url, apiKey, { model: "demo-broken", max_tokens: 10, messages: messages("fail") });
  await res.text();
  return { requestId: res.headers.get("x-request-id")!, kind: "upstream_failure", status: res.status };
}

/**
 * A big streamed request that the client abandons after its first words; while it still holds
 * its worst case, a second request of the same size is refused for credit on the other edge.
 */
async function cancelledWithRefusal(urls: string[], apiKey: string): Promise<Seen[]> {
  const abort = new AbortController();
  const res = await postChat(
    urls[0]!,
    apiKey,
    { model: "demo-small", max_tokens: BIG_MAX_TOKENS, stream: true, messages: messages("a long story") },
    abort.signal,
  );
  const reader = res.body!.getReader();
  let received = "";
  while (!received.includes('"content":"') || !/"content":"[^"]+"/.test(received)) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the stream ended before its first words");
    received += new TextDecoder().decode(value);
  }
  const refusedRes = await postChat(urls[1]!, apiKey, {
    model: "demo-small",
    max_tokens: BIG_MAX_TOKENS,
    messages: messages("me too"),
  });
  const refused = (await refusedRes.json()) as { error: { code: string } };
  expect(refused.error.code).toBe("insufficient_credits");
  abort.abort();
  return [
    { requestId: res.headers.get("x-request-id")!, kind: "cancelled", status: res.status },
    { requestId: refusedRes.headers.get("x-request-id")!, kind: "refused", status: refusedRes.status },
  ];
}

/** One account's mixed workload, spread over both edges and run concurrently. */
async function workload(urls: string[], apiKey: string): Promise<Seen[]> {
  const edge = (i: number) => urls[i % urls.length]!;
  const groups = await Promise.all([
    cancelledWithRefusal(urls, apiKey),
    ...[0, 1].map((i) => success(edge(i), apiKey, i)),
    ...[0, 1].map((i) => streamed(edge(i), apiKey, i)),
    ...[0, 1].map((i) => upstreamFailure(edge(i), apiKey)),
  ]);
  return groups.flat();
}

describe("money is conserved after a mixed workload through the edges", () => {
  it("grants − charges = balances, entries balance, and usage records match the postings", async () => {
    const accounts = [await signUp(system.url), await signUp(system.url)];
    const seen = (await Promise.all(accounts.map((a) => workload(system.urls, a.apiKey)))).flat();

    for (const s of seen) {
      const expected = { success: 200, streamed: 200, cancelled: 200, upstream_failure: 502, refused: 402 }[s.kind];
      expect(s.status, s.kind).toBe(expected);
    }
    // Everything that reached registry is recorded; refusals never got that far.
    const recorded = seen.filter((s) => s.kind !== "refused");
    const count = () => db.figure(`select count(*)::text as v from usage_records`);
    for (const deadline = Date.now() + 15_000; (await count()) < BigInt(recorded.length);) {
      if (Date.now() > deadline) throw new Error(`only ${await count()} of ${recorded.length} requests settled`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(await count()).toBe(BigInt(recorded.length));

    // Per request: what the client was told is what it paid; failures cost nothing.
    const rows = await db.query<Record<string, string | boolean>>(`select * from usage_records`);
    const byRequest = new Map(rows.map((row) => [row.request_id as string, row]));
    for (const s of recorded) {
      const row = byRequest.get(s.requestId)!;
      expect(row, `${s.kind} ${s.requestId}`).toBeDefined();
      if (s.usage) {
        const cost = costMicros(
          BigInt(s.usage.prompt_tokens),
          BigInt(s.usage.completion_tokens),
          DEMO_PRICES.input,
          DEMO_PRICES.output,
        );
        expect(row).toMatchObject({ success: true, cost_micros: String(cost) });
      }
      if (s.kind === "upstream_failure") {
        expect(row).toMatchObject({ success: false, error_code: "upstream_error", cost_micros: "0" });
      }
      if (s.kind === "cancelled") {
        expect(row).toMatchObject({ success: false, error_code: "client_cancelled" });
        expect(BigInt(row.cost_micros as string)).toBeGreaterThan(0n);
        expect(BigInt(row.output_tokens as string)).toBeLessThan(100n);
      }
    }
    for (const row of rows) {
      expect(BigInt(row.platform_fee_micros as string) + BigInt(row.hoster_earned_micros as string)).toBe(
        BigInt(row.cost_micros as string),
      );
    }

    // Per account: the grant minus its charges is its balance, and nothing is still held once the
    // edges' idle leases are closed (two TTLs without a request, then a heartbeat: about 25 s here).
    for (const { accountId } of accounts) {
      const charged = await db.figure(`select sum(cost_micros)::text as v from usage_records where account_id = $1`, [
        accountId,
      ]);
      const wallet = async () =>
        (await db.query(`select posted_micros, held_micros from wallets where account_id = $1`, [accountId]))[0];
      await expect
        .poll(wallet, { timeout: 60_000 })
        .toEqual({ posted_micros: String(GRANT_MICROS - charged), held_micros: "0" });
    }

    // Ledger-wide: grants − charges = balances, usage records = customer charge postings,
    // platform and hoster shares = their postings, every entry sums to zero; and each settled
    // batch's legs are the sums of its records (the reconciliation finds nothing).
    const postingsOf = (kind: string, accountPattern: string) =>
      db.figure(
        `select sum(p.amount_micros)::text as v from ledger_postings p join journal_entries e on e.id = p.entry_id
         where e.kind = any($1) and p.ledger_account like $2`,
        [kind === "usage" ? ["usage", "usage_batch"] : [kind], accountPattern],
      );
    const granted = await postingsOf("grant", "customer:%");
    // Nothing is written off here (every request is paid from its hold), so the customer legs are the costs.
    expect(await db.figure(`select coalesce(sum(write_off_micros), 0)::text as v from usage_records`)).toBe(0n);
    const charges = -(await postingsOf("usage", "customer:%"));
    const balances = await db.figure(`select sum(posted_micros)::text as v from wallets`);
    expect(granted).toBe(GRANT_MICROS * BigInt(accounts.length));
    expect(granted - charges).toBe(balances);
    const sums = await db.query<{ cost: string; fee: string; earned: string }>(
      `select sum(cost_micros)::text as cost, sum(platform_fee_micros)::text as fee,
         sum(hoster_earned_micros)::text as earned from usage_records`,
    );
    expect(BigInt(sums[0]!.cost)).toBe(charges);
    expect(charges).toBeGreaterThan(0n);
    expect(await postingsOf("usage", "platform:revenue")).toBe(BigInt(sums[0]!.fee));
    expect(await postingsOf("usage", "hoster:%")).toBe(BigInt(sums[0]!.earned));
    expect(await ledgerInvariants(db)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
    expect(await reconcile((sql) => db.query(sql))).toEqual([]);
  }, 120_000);
});
