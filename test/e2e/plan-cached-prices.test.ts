import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { apiCall, type Json } from "./api-call.ts";
import { REQUEST_CHARGE_SQL } from "../../services/billing/test/billing-harness.ts";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// A plan's cached-input price through the whole system: a subscriber's conversation is served
// partly from the demo model's prefix cache (its second turn resends the first), and the cached
// tokens are charged at the plan's cached price by the cost rule, to the micro-dollar, in the
// answer's usage.cost, GET /v1/generations/{id} and the ledger; on an overage plan its cached
// tokens are the last its included tokens cover; a subscriber keeps the cached price it bought.

let system: RunningSystem;
let db: BillingDb;
let hoster: RegisteredHoster;

beforeAll(async () => {
  system = await startSystem();
  db = await openBillingDb(system.databaseUrl);
  hoster = await registerHoster(system, { name: "Caching Hoster" });
});
afterAll(async () => {
  await db?.close();
  await system?.close();
  await hoster?.server.close();
});

/** micro-USD per 1M tokens. */
type Prices = { input: bigint; cached: bigint; output: bigint };

/** The cost rule: ceil(((input − cached) × input price + cached × cached price + output × output price) / 1M). */
const ruleCost = (t: Turn, p: Prices) =>
  (BigInt(t.input - t.cached) * p.input + BigInt(t.cached) * p.cached + BigInt(t.output) * p.output + 999_999n) /
  1_000_000n;

const micros = (usd: number) => BigInt(Math.round(usd * 1e6));

/** One answered turn: its tokens as the answer's usage reports them, and its cost. */
interface Turn {
  requestId: string;
  input: number;
  cached: number;
  output: number;
  costMicros: bigint;
  answer: string;
}

type Message = OpenAI.ChatCompletionMessageParam;

async function turn(key: string, messages: Message[], maxTokens = 8): Promise<Turn> {
  const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: key, maxRetries: 0 });
  const completion = await client.chat.completions.create({ model: hoster.modelId, messages, max_tokens: maxTokens });
  const usage = completion.usage as OpenAI.CompletionUsage & { cost: number };
  return {
    requestId: completion.id.slice("chatcmpl-".length),
    input: usage.prompt_tokens,
    cached: usage.prompt_tokens_details?.cached_tokens ?? 0,
    output: usage.completion_tokens,
    costMicros: micros(usage.cost),
    answer: completion.choices[0]!.message.content ?? "",
  };
}

/**
 * A conversation of two turns: the second resends the first and its answer, so the model has
 * seen its leading message and reports it cached. `opening` makes the conversation long.
 */
async function conversation(key: string, opening = ""): Promise<[Turn, Turn]> {
  const first: Message[] = [{ role: "user", content: `${opening}Conversation ${randomToken(8)}: hello.` }];
  const one = await turn(key, first);
  const two = await turn(key, [
    ...first,
    { role: "assistant", content: one.answer },
    { role: "user", content: "And then?" },
  ]);
  expect(one.cached).toBe(0);
  expect(two.cached).toBeGreaterThan(0);
  expect(two.cached).toBeLessThan(two.input);
  return [one, two];
}

/** GET /v1/generations/{id} once the request has settled. */
async function generation(key: string, requestId: string): Promise<Json> {
  let res = await apiCall(system.url, "GET", `/v1/generations/${requestId}`, { key });
  for (const deadline = Date.now() + 15_000; res.status === 404 && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    res = await apiCall(system.url, "GET", `/v1/generations/${requestId}`, { key });
  }
  expect(res.status).toBe(200);
  return res.body;
}

/**
 * What the ledger charged the customer for the request (0 when it posted nothing): its record's
 * cost, in its batch entry's customer leg (REQUEST_CHARGE_SQL).
 */
const posted = (requestId: string) => db.figure(REQUEST_CHARGE_SQL, [requestId]);

/** Asserts the turn was charged `expected` micro-USD in its answer, its generation and the ledger. */
async function expectCharged(key: string, t: Turn, expected: bigint) {
  expect(t.costMicros).toBe(expected);
  const g = await generation(key, t.requestId);
  expect(g).toMatchObject({ input_tokens: t.input, cached_tokens: t.cached, output_tokens: t.output });
  expect(micros(g.cost_usd as number)).toBe(expected);
  expect(await posted(t.requestId)).toBe(expected);
}

async function createPlan(body: Json): Promise<string> {
  const res = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: { name: `Plan ${randomToken(4)}`, ...body },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.product_id as string;
}

/** A new customer subscribed to the plan: its account key and the subscription's scoped key. */
async function subscribe(productId: string): Promise<{ apiKey: string; scopedKey: string }> {
  const { apiKey } = await signUp(system.url);
  const res = await apiCall(system.url, "POST", "/v1/subscriptions", { key: apiKey, body: { product_id: productId } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { apiKey, scopedKey: res.body.api_key as string };
}

const PAYG = { input: 2_000_000n, cached: 200_000n, output: 6_000_000n };
const paygPlan = (cached: bigint | undefined) => ({
  pricing_model: "payg",
  input_price_per_1m_usd: Number(PAYG.input) / 1e6,
  output_price_per_1m_usd: Number(PAYG.output) / 1e6,
  ...(cached === undefined ? {} : { cached_input_price_per_1m_usd: Number(cached) / 1e6 }),
});

describe("a payg plan's cached-input price", () => {
  it("charges cached tokens at the plan's cached price, fresh ones at its input price", async () => {
    const { scopedKey } = await subscribe(await createPlan(paygPlan(PAYG.cached)));
    const [one, two] = await conversation(scopedKey);
    await expectCharged(scopedKey, one, ruleCost(one, PAYG));
    await expectCharged(scopedKey, two, ruleCost(two, PAYG));
    // The discount is real: the same tokens at the input price cost more.
    expect(ruleCost(two, PAYG)).toBeLessThan(ruleCost(two, { ...PAYG, cached: PAYG.input }));
  });

  it("charges an explicit 0 as 0 and an absent one as the input price", async () => {
    const free = (await subscribe(await createPlan(paygPlan(0n)))).scopedKey;
    const [, freeCached] = await conversation(free);
    await expectCharged(free, freeCached, ruleCost(freeCached, { ...PAYG, cached: 0n }));

    const absent = (await subscribe(await createPlan(paygPlan(undefined)))).scopedKey;
    const [, uncached] = await conversation(absent);
    await expectCharged(absent, uncached, ruleCost(uncached, { ...PAYG, cached: PAYG.input }));
  });
});

describe("a subscriber's terms snapshot", () => {
  const subscription = async (key: string) =>
    ((await apiCall(system.url, "GET", "/v1/subscriptions", { key })).body.data as Json[])[0]!;

  /** Runs a renewal pass at the subscription's period end, as billing's scheduler would then. */
  async function renewAtPeriodEnd(key: string) {
    const periodEnd = (await subscription(key)).period_end as string;
    // A pass skips a row a lease heartbeat holds locked at that moment; the next pass renews it.
    await expect
      .poll(
        async () => {
          await system.renewSubscriptions(new Date(periodEnd));
          return (await subscription(key)).period_start;
        },
        { timeout: 10_000 },
      )
      .toBe(periodEnd);
  }

  it("keeps its cached price after the plan's rises, through a renewal; a later cut reaches it at the next", async () => {
    const productId = await createPlan(paygPlan(PAYG.cached));
    const { apiKey, scopedKey } = await subscribe(productId);
    const edit = (usd: number) =>
      apiCall(system.url, "PATCH", `/hosters/products/${productId}`, {
        cookie: hoster.cookie,
        body: { cached_input_price_per_1m_usd: usd },
      });

    expect((await edit(1.5)).body).toMatchObject({ cached_input_price_per_1m_usd: 1.5 });
    const [, raised] = await conversation(scopedKey);
    await expectCharged(scopedKey, raised, ruleCost(raised, PAYG));

    // Renewal takes the lower of the snapshot's and the plan's: still its own.
    await renewAtPeriodEnd(apiKey);
    const [, renewed] = await conversation(scopedKey);
    await expectCharged(scopedKey, renewed, ruleCost(renewed, PAYG));

    // The plan cuts it below the snapshot's: the next renewal brings the cut.
    expect((await edit(0.05)).status).toBe(200);
    await renewAtPeriodEnd(apiKey);
    const [, cut] = await conversation(scopedKey);
    await expectCharged(scopedKey, cut, ruleCost(cut, { ...PAYG, cached: 50_000n }));
  });
});

describe("a subscription_overage plan's cached price", () => {
  it("prices the overage tokens among the cached ones at the cached price when a request crosses its included tokens", async () => {
    const OVERAGE = 40_000_000n; // 40 USD per 1M
    const CACHED_OVERAGE = 4_000_000n;
    const INCLUDED = 100;
    const { scopedKey } = await subscribe(
      await createPlan({
        pricing_model: "subscription_overage",
        monthly_price_usd: 0.5,
        included_tokens: INCLUDED,
        overage_price_per_1m_usd: Number(OVERAGE) / 1e6,
        cached_input_price_per_1m_usd: Number(CACHED_OVERAGE) / 1e6,
      }),
    );
    const first: Message[] = [{ role: "user", content: `Conversation ${randomToken(8)}: hello.` }];
    const one = await turn(scopedKey, first);
    expect(one.input + one.output).toBeLessThan(INCLUDED / 2);
    await expectCharged(scopedKey, one, 0n);

    // The second turn's prompt is longer than the included tokens left: it takes them all and
    // pays for the rest, whose cached tokens are the first to pay (the last the included cover).
    const long = "Tell me everything about the weather in Oslo, please. ".repeat(15);
    const two = await turn(scopedKey, [
      ...first,
      { role: "assistant", content: one.answer },
      { role: "user", content: long },
    ]);
    const left = INCLUDED - (one.input + one.output);
    const beyond = two.input + two.output - left;
    expect(two.cached).toBeGreaterThan(0);
    expect(beyond).toBeGreaterThan(two.cached);
    const cachedBeyond = BigInt(two.cached);
    const freshBeyond = BigInt(beyond) - cachedBeyond;
    const expected = (freshBeyond * OVERAGE + cachedBeyond * CACHED_OVERAGE + 999_999n) / 1_000_000n;
    await expectCharged(scopedKey, two, expected);
    expect(expected).toBeLessThan((BigInt(beyond) * OVERAGE + 999_999n) / 1_000_000n);
  });
});

describe("a free plan", () => {
  it("charges nothing and still shows the cached tokens", async () => {
    const { scopedKey } = await subscribe(await createPlan({ pricing_model: "free" }));
    const [one, two] = await conversation(scopedKey);
    await expectCharged(scopedKey, one, 0n);
    await expectCharged(scopedKey, two, 0n);
  });
});
