import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuthorizeResult } from "@mkt/proto/billing/v1/billing";
import { authorizeRequest, ledgerInvariants, startTestBilling, type TestBilling } from "./billing-harness.ts";

let t: TestBilling;
beforeAll(async () => {
  // Starting credit $0.001 = 1000 micro-USD; "tight" allows 3 requests a minute.
  t = await startTestBilling({
    STARTING_CREDIT_USD: "0.001",
    TIERS: JSON.stringify({
      free: { limit_per_minute: 60, limit_per_day: 1000 },
      tight: { limit_per_minute: 3, limit_per_day: 1000 },
    }),
  });
});
afterAll(async () => {
  await t?.close();
});

const grantOf = (result: AuthorizeResult | undefined) => {
  if (!result?.grant) throw new Error(`expected a grant, got ${JSON.stringify(result?.refusal)}`);
  return result.grant;
};

async function counters(accountId: string) {
  const rows = await t.query<{ window: string; count: string }>(
    `select "window", count::text from rate_counters where account_id = $1 order by "window"`,
    [accountId],
  );
  return Object.fromEntries(rows.map((r) => [r.window, Number(r.count)]));
}

describe("AuthorizeBatch", () => {
  it("answers each request as if alone, in request order, in one call", async () => {
    const [rich, poor, tight] = [randomUUID(), randomUUID(), randomUUID()];
    // Each request holds ceil((100 × 0.50 + 200 × 1.50) / 1M USD) = 350 micro-USD of the 1000.
    const ask = (accountId: string, extra = {}) =>
      authorizeRequest({ accountId, inputTokens: 100n, requestedMaxOutputTokens: 200n, ...extra });
    const earlier = ask(rich);
    await t.client.authorize(earlier);
    const requests = [
      ask(poor), // 350 of 1000
      ask(tight, { tier: "tight" }), // 1st of 3 this minute
      ask(poor), // 700
      ask(rich), // 700 with the earlier one
      ask(poor), // 1050 > 1000: insufficient credits
      ask(tight, { tier: "tight" }), // 2nd
      { ...ask(rich, { requestedMaxOutputTokens: 10n }), requestId: earlier.requestId }, // authorized before
      ask(tight, { tier: "tight", requestedMaxOutputTokens: 100_000n }), // refused by context: not counted
      ask(tight, { tier: "tight", inputTokens: 10n, requestedMaxOutputTokens: 10n }), // 3rd
      ask(tight, { tier: "tight" }), // 4th: over the tier's limit
    ];
    requests.push({ ...requests[0]!, accountId: randomUUID() }); // a request id twice in one batch
    const { results } = await t.client.authorizeBatch({ requests });
    expect(results).toHaveLength(requests.length);
    const codes = results.map((r) => r.refusal?.code ?? "granted");
    expect(codes).toEqual([
      "granted",
      "granted",
      "granted",
      "granted",
      "insufficient_credits",
      "granted",
      "invalid_request",
      "max_tokens_exceeded",
      "granted",
      "rate_limit_exceeded",
      "invalid_request",
    ]);
    expect(results[6]!.refusal).toMatchObject({ message: "request_id was already authorized.", param: "request_id" });
    expect(results[9]!.refusal!.headers).toMatchObject({ "retry-after": expect.any(String) });
    expect(grantOf(results[0])).toMatchObject({ reservedMicros: 350n, maxOutputTokens: 200n, holdsSlot: false });
    // The rate-limit status each grant reports counts the requests admitted before it.
    expect(grantOf(results[1]).rateLimit).toMatchObject({ limitPerMinute: 3n, remainingThisMinute: 2n });
    expect(grantOf(results[5]).rateLimit).toMatchObject({ remainingThisMinute: 1n });
    expect(grantOf(results[8]).rateLimit).toMatchObject({ remainingThisMinute: 0n });

    // Holds and counters are what the admitted requests left, and nothing else.
    const held = await t.query<{ account_id: string; held_micros: string }>(
      `select account_id, held_micros::text from wallets where account_id = any($1::uuid[])`,
      [[rich, poor, tight]],
    );
    const heldOf = Object.fromEntries(held.map((w) => [w.account_id, w.held_micros]));
    expect(heldOf[poor]).toBe("700");
    expect(heldOf[rich]).toBe("700");
    expect(await counters(poor)).toEqual({ day: 2, minute: 2 });
    expect(await counters(tight)).toEqual({ day: 3, minute: 3 });
    const [reservations] = await t.query<{ n: string }>(
      `select count(*)::text as n from reservations where account_id = any($1::uuid[])`,
      [[rich, poor, tight]],
    );
    expect(reservations!.n).toBe("7");
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });

  it("serves concurrent batches over the same accounts without overspending or deadlocking", async () => {
    const accounts = Array.from({ length: 6 }, () => randomUUID());
    // 20 batches of 12 at once, every account in every batch: 240 requests of 350 for 6 × 1000.
    const batches = Array.from({ length: 20 }, () =>
      t.client.authorizeBatch({
        requests: [...accounts, ...accounts].map((accountId) =>
          authorizeRequest({ accountId, inputTokens: 100n, requestedMaxOutputTokens: 200n }),
        ),
      }),
    );
    const results = (await Promise.all(batches)).flatMap((b) => b.results);
    const granted = results.filter((r) => r.grant).length;
    expect(results.filter((r) => r.refusal && r.refusal.code !== "insufficient_credits")).toEqual([]);
    expect(granted).toBe(6 * 2); // two holds of 350 fit in 1000, a third does not
    const [row] = await t.query<{ held: string }>(
      `select sum(held_micros)::text as held from wallets where account_id = any($1::uuid[])`,
      [accounts],
    );
    expect(row!.held).toBe(String(12 * 350));
  });

  it("answers each part of a batch on its own when one part's transaction fails", async () => {
    // A database failure for one request's insert (a trigger standing in for a broken disk).
    await t.query(`create or replace function fail_boom() returns trigger language plpgsql as $$
      begin if new.request_id like 'boom-%' then raise exception 'disk on fire'; end if; return new; end $$`);
    await t.query(`create trigger fail_boom before insert on reservations for each row execute function fail_boom()`);
    try {
      const [a, b] = [randomUUID(), randomUUID()];
      const { results } = await t.client.authorizeBatch({
        requests: [
          authorizeRequest({ accountId: a, requestId: `boom-${randomUUID()}` }),
          authorizeRequest({ accountId: b }),
          // A scoped key's request runs its own transaction; its subscription does not exist.
          authorizeRequest({ accountId: b, subscriptionId: randomUUID(), provider: "hoster", hosterId: randomUUID() }),
        ],
      });
      // The shared transaction rolled back as a whole: both of its requests fail, holding nothing.
      expect(results.map((r) => r.refusal?.code)).toEqual(["internal_error", "internal_error", "invalid_api_key"]);
      expect(results[0]!.refusal!.message).toBe("Internal error.");
      const held = await t.query<{ n: string }>(
        `select count(*)::text as n from reservations where account_id = any($1::uuid[])`,
        [[a, b]],
      );
      expect(held[0]!.n).toBe("0");
    } finally {
      await t.query(`drop trigger fail_boom on reservations`);
    }
  });
});
