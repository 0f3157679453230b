import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { authorizeRequest, ledgerInvariants, startTestBilling, type TestBilling } from "./billing-harness.ts";
import { refusal } from "@mkt/testkit/refusal";

let t: TestBilling;
beforeAll(async () => {
  t = await startTestBilling();
});
afterAll(async () => {
  await t?.close();
});

// $1000 per 1M output tokens: one output token costs exactly $0.001, so 5.00 pays 5000 tokens.
const pricey = {
  inputPricePer1mMicros: 0n,
  outputPricePer1mMicros: 1_000_000_000n,
  contextWindow: 100_000n,
  maxOutputTokensCap: 100_000n,
};

describe("Authorize", () => {
  it("holds the worst-case cost of the prompt plus max_tokens", async () => {
    const accountId = randomUUID();
    const res = await t.client.authorize(
      authorizeRequest({ accountId, inputTokens: 100n, requestedMaxOutputTokens: 200n }),
    );
    // ceil((100 × 0.50 + 200 × 1.50) / 1M USD) = 350 micro-USD
    expect(res.reservedMicros).toBe(350n);
    expect(res.maxOutputTokens).toBe(200n);
    expect(res.rateLimit).toMatchObject({ limitPerMinute: 60n, remainingThisMinute: 59n });
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n - 350n);
    const [row] = await t.query(`select status, reserved_micros, max_output_tokens from reservations where id = $1`, [
      res.reservationId,
    ]);
    expect(row).toEqual({ status: "held", reserved_micros: "350", max_output_tokens: "200" });
  });

  it("caps output at the route cap, then the context room, when max_tokens is not given", async () => {
    const capped = await t.client.authorize(authorizeRequest({ inputTokens: 100n }));
    expect(capped.maxOutputTokens).toBe(4096n);
    expect(capped.reservedMicros).toBe(50n + 6144n);
    const roomBound = await t.client.authorize(authorizeRequest({ inputTokens: 8000n }));
    expect(roomBound.maxOutputTokens).toBe(192n);
  });

  it("holds every choice's output when the client asks for n choices", async () => {
    const accountId = randomUUID();
    const res = await t.client.authorize(
      authorizeRequest({ accountId, inputTokens: 100n, requestedMaxOutputTokens: 200n, choices: 3n }),
    );
    // ceil((100 × 0.50 + 3 × 200 × 1.50) / 1M USD) = 950 micro-USD; the cap stays per choice.
    expect(res.reservedMicros).toBe(950n);
    expect(res.maxOutputTokens).toBe(200n);
    const [row] = await t.query(`select max_output_tokens from reservations where id = $1`, [res.reservationId]);
    expect(row).toEqual({ max_output_tokens: "600" });

    // Without max_tokens, what the balance pays is shared between the choices.
    const shared = await t.client.authorize(authorizeRequest({ accountId: randomUUID(), ...pricey, choices: 4n }));
    expect(shared.maxOutputTokens).toBe(1250n);
    expect(shared.reservedMicros).toBe(5_000_000n);

    const tooMany = await refusal(t.client.authorize(authorizeRequest({ choices: 129n })));
    expect(tooMany).toMatchObject({ code: "invalid_request", param: "n" });
  });

  it("caps output at what the balance pays when max_tokens is not given", async () => {
    const accountId = randomUUID();
    const res = await t.client.authorize(authorizeRequest({ accountId, ...pricey }));
    expect(res.maxOutputTokens).toBe(5000n);
    expect(res.reservedMicros).toBe(5_000_000n);
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(0n);

    // Nothing left: not even one output token is affordable.
    const err = await refusal(t.client.authorize(authorizeRequest({ accountId, ...pricey })));
    expect(err.code).toBe("insufficient_credits");
    expect(err.message).toContain("$0.00");
    expect(err.message).toContain("$0.001");
  });

  it("refuses with insufficient_credits, naming balance and amount needed, and holds nothing", async () => {
    const accountId = randomUUID();
    const err = await refusal(
      t.client.authorize(authorizeRequest({ accountId, ...pricey, requestedMaxOutputTokens: 6000n })),
    );
    expect(err.code).toBe("insufficient_credits");
    expect(err.httpStatus).toBe(402);
    expect(err.message).toContain("$5.00");
    expect(err.message).toContain("$6.00");
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n);
    expect(await t.query(`select 1 from reservations where account_id = $1`, [accountId])).toHaveLength(0);
    // The refused request was not counted against the rate limits either.
    const summary = await t.client.getUsageSummary({ accountId, tier: "free" });
    expect(summary.rateLimits?.requestsThisMinute).toBe(0n);
    expect(summary.rateLimits?.requestsToday).toBe(0n);
  });

  it("refuses a prompt over the context window with context_length_exceeded (param messages)", async () => {
    const err = await refusal(t.client.authorize(authorizeRequest({ inputTokens: 9000n })));
    expect(err).toMatchObject({ code: "context_length_exceeded", param: "messages", httpStatus: 400 });
    const full = await refusal(t.client.authorize(authorizeRequest({ inputTokens: 8192n })));
    expect(full).toMatchObject({ code: "context_length_exceeded", param: "messages" });
  });

  it("refuses max_tokens over the cap or the context room with max_tokens_exceeded (param max_tokens)", async () => {
    const overCap = await refusal(t.client.authorize(authorizeRequest({ requestedMaxOutputTokens: 5000n })));
    expect(overCap).toMatchObject({ code: "max_tokens_exceeded", param: "max_tokens", httpStatus: 400 });
    const overRoom = await refusal(
      t.client.authorize(authorizeRequest({ inputTokens: 8100n, requestedMaxOutputTokens: 200n })),
    );
    expect(overRoom).toMatchObject({ code: "max_tokens_exceeded", param: "max_tokens" });
  });

  it("holds no money on a free route but still records the reservation", async () => {
    const accountId = randomUUID();
    const res = await t.client.authorize(
      authorizeRequest({
        accountId,
        inputPricePer1mMicros: 0n,
        outputPricePer1mMicros: 0n,
        provider: "hoster",
        hosterId: "h1",
      }),
    );
    expect(res.reservedMicros).toBe(0n);
    expect(res.maxOutputTokens).toBe(4096n);
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n);
    expect(await t.query(`select status from reservations where id = $1`, [res.reservationId])).toEqual([
      { status: "held" },
    ]);
  });

  it("refuses a request_id that was already authorized, holding nothing twice", async () => {
    const accountId = randomUUID();
    const req = authorizeRequest({ accountId, requestedMaxOutputTokens: 200n });
    await t.client.authorize(req);
    const err = await refusal(t.client.authorize(req));
    expect(err).toMatchObject({ code: "invalid_request", param: "request_id" });
    expect((await t.client.getBalance({ accountId })).creditBalanceMicros).toBe(5_000_000n - 350n);
  });

  it("keeps the ledger balanced", async () => {
    expect(await ledgerInvariants(t)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  });
});

describe("ReleaseSlot", () => {
  it("marks the slot released once, and accepts unknown ids", async () => {
    const res = await t.client.authorize(authorizeRequest());
    await t.client.releaseSlot({ reservationId: res.reservationId });
    const [first] = await t.query<{ slot_released_at: Date }>(
      `select slot_released_at from reservations where id = $1`,
      [res.reservationId],
    );
    expect(first?.slot_released_at).toBeInstanceOf(Date);
    await t.client.releaseSlot({ reservationId: res.reservationId });
    const [second] = await t.query<{ slot_released_at: Date }>(
      `select slot_released_at from reservations where id = $1`,
      [res.reservationId],
    );
    expect(second?.slot_released_at.getTime()).toBe(first?.slot_released_at.getTime());

    await expect(t.client.releaseSlot({ reservationId: randomUUID() })).resolves.toEqual({});
    await expect(t.client.releaseSlot({ reservationId: "nonsense" })).resolves.toEqual({});
  });
});
