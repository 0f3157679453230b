/**
 * Windows and races (docs/leases.md#the-path-of-a-chat-request): a UTC minute boundary under load
 * never admits more than the account's per-minute limit in either minute, on two edges.
 *
 * Billing keys the account's request windows by its own wall clock, by UTC calendar minute
 * (lease-windows.ts, rate-limiter.ts): each lease allowance of `requests_minute` belongs to one
 * window (`window_start`), and the last heartbeat before a boundary carries the next window's room,
 * usable by the edge from the boundary on. 16 clients hammer both edges from ~1.5 s before a
 * minute ends to ~2.5 s after it; what each minute admitted is then read from the edges' reported
 * admitted totals per window (billing's count of each minute), billing's window counters, and
 * two lower views: requests sent and answered within one minute, and usage records by the minute
 * their request reached the edge (`started_at`). A request that reached the edge just before the
 * boundary may wait for the next minute's room (or a grant) and be admitted in it, so records
 * dated in the first minute may belong to the second; those dated in the second never belong to
 * the first.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

const LIMIT = 12;
const CLIENTS = 16;
/** Start this long before a minute ends, and stop this long after it began. */
const LEAD_MS = 1_500;
const TAIL_MS = 2_500;
/** The product's default TTL, on billing and both edges: the next window's room comes one TTL ahead. */
const LEASE_TTL_MS = "2000";

let system: RunningSystem;
let db: BillingDb;
beforeAll(async () => {
  system = await startSystem({
    edges: 2,
    billing: {
      TIERS: JSON.stringify({ free: { limit_per_minute: LIMIT, limit_per_day: 10_000 } }),
      LEASE_TTL_MS,
    },
    model: { DEMO_COMPLETION_TOKENS: "4", DEMO_TOKENS_PER_SECOND: "1000" },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const minuteOf = (ms: number) => Math.floor(ms / 60_000) * 60_000;

interface Outcome {
  status: number;
  code?: string;
  requestId: string;
  sentAt: number;
  answeredAt: number;
}

describe("a minute boundary under load on two edges", () => {
  it("never admits more than the per-minute limit in either minute, and the second minute admits", async () => {
    const { apiKey, accountId } = await signUp(system.url);

    // Wait for ~1.5 s before the end of a UTC minute (the next one if this one is too far gone).
    let wait = minuteOf(Date.now()) + 60_000 - LEAD_MS - Date.now();
    if (wait < 0) wait += 60_000;
    await sleep(wait);
    const boundary = minuteOf(Date.now()) + 60_000;
    const stopAt = boundary + TAIL_MS;

    const outcomes: Outcome[] = [];
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, c) => {
        for (let i = 0; Date.now() < stopAt; i++) {
          const sentAt = Date.now();
          const res = await postChat(system.urls[c % 2]!, apiKey, {
            model: "demo-small",
            max_tokens: 4,
            messages: [{ role: "user", content: `client ${c} request ${i}` }],
          });
          const text = await res.text();
          const outcome: Outcome = {
            status: res.status,
            requestId: res.headers.get("x-request-id") ?? "",
            sentAt,
            answeredAt: Date.now(),
          };
          if (res.status !== 200) outcome.code = (JSON.parse(text) as { error: { code: string } }).error.code;
          outcomes.push(outcome);
          // A refused client tries again soon (the edge answers a cached 429 in microseconds).
          if (res.status !== 200) await sleep(20);
        }
      }),
    );

    const admitted = outcomes.filter((o) => o.status === 200);
    const refused = outcomes.filter((o) => o.status !== 200);
    for (const o of refused) expect(o, o.requestId).toMatchObject({ status: 429, code: "rate_limit_exceeded" });
    // Where a request was wholly on one side of the boundary, the client knows its minute.
    const clientSide = (minute: number) =>
      admitted.filter((o) => minuteOf(o.sentAt) === minute && minuteOf(o.answeredAt) === minute).length;
    const first = boundary - 60_000;

    // Billing's view, once the edges' heartbeats reported everything they admitted (one TTL/2).
    const perWindow = async () =>
      db.query<{ window_start: Date; admitted: string; granted: string; [key: string]: unknown }>(
        `select a.window_start, sum(a.admitted)::text as admitted, sum(a.granted)::text as granted
         from lease_allowances a join leases l on l.id = a.lease_id
         where l.account_id = $1 and a.scope = '' and a.resource = 'requests_minute'
         group by a.window_start order by a.window_start`,
        [accountId],
      );
    const reported = async () => (await perWindow()).reduce((sum, w) => sum + Number(w.admitted), 0);
    await expect.poll(reported, { timeout: 15_000 }).toBe(admitted.length);
    const windows = await perWindow();
    const counters = await db.query<{ window_start: Date; count: string; [key: string]: unknown }>(
      `select window_start, count::text as count from rate_counters where account_id = $1 and "window" = 'minute'
       order by window_start`,
      [accountId],
    );
    // The usage records of the requests admitted, by the minute registry started them in.
    await expect
      .poll(
        () => db.figure(`select count(*)::text as v from usage_records where account_id = $1 and success`, [accountId]),
        { timeout: 15_000 },
      )
      .toBe(BigInt(admitted.length));
    const records = await db.query<{ minute: Date; n: string; [key: string]: unknown }>(
      `select date_trunc('minute', created_at) as minute, count(*)::text as n from usage_records
       where account_id = $1 and success group by 1 order by 1`,
      [accountId],
    );

    const admittedIn = (minute: number) =>
      Number(windows.find((w) => w.window_start.getTime() === minute)?.admitted ?? 0);
    const recordsIn = (minute: number) => Number(records.find((r) => r.minute.getTime() === minute)?.n ?? 0);
    const straddling = admitted.filter((o) => o.sentAt < boundary && o.answeredAt >= boundary);
    console.log(
      `minute boundary: ${outcomes.length} requests, ${admitted.length} admitted; per window ` +
        windows.map((w) => `${w.window_start.toISOString()} admitted ${w.admitted}/granted ${w.granted}`).join(", ") +
        `; counters ${counters.map((c) => c.count).join(", ")}; usage records ${records.map((r) => r.n).join(", ")}; ` +
        `client-side ${clientSide(first)} + ${clientSide(boundary)}; refused ${refused.length}; ` +
        `sent before the boundary and answered after it: ${straddling.length}, answered ` +
        `${straddling.map((o) => o.answeredAt - boundary).join(", ")} ms after it`,
    );

    // Only the two minutes the load spanned.
    for (const w of windows) expect([first, boundary]).toContain(w.window_start.getTime());
    for (const minute of [first, boundary]) {
      const at = new Date(minute).toISOString();
      expect(admittedIn(minute), `admitted in ${at}`).toBeLessThanOrEqual(LIMIT);
      expect(clientSide(minute), `sent and answered within ${at}`).toBeLessThanOrEqual(LIMIT);
    }
    expect(
      recordsIn(boundary),
      "usage records of requests that reached an edge in the second minute",
    ).toBeLessThanOrEqual(LIMIT);
    for (const c of counters) expect(Number(c.count), c.window_start.toISOString()).toBeLessThanOrEqual(LIMIT);
    // Both windows were under load: the first minute's room was used up before the boundary, and
    // the second minute admitted once it began.
    expect(admittedIn(first)).toBeGreaterThan(0);
    expect(admittedIn(boundary), "the second minute admitted requests").toBeGreaterThan(0);
    expect(admitted.filter((o) => o.answeredAt >= boundary).length).toBeGreaterThan(0);
    expect(refused.length, "the load exceeded the limit").toBeGreaterThan(0);
    expect(admitted.length).toBe(admittedIn(first) + admittedIn(boundary));
  }, 120_000);
});
