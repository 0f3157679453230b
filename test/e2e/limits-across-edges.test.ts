import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { postChat } from "./billing-db.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";
import { apiCall, type Json } from "./api-call.ts";

// Limits across edges and recall (docs/architecture.md#no-overspend-on-any-number-of-edges): every
// limit a lease carries holds exactly on two HTTP edges behind one billing (never more admitted
// than the limit in any window, whichever edge a request lands on), and a hoster's pause is refused
// on both edges at once.
// Reports trail admission by one lease heartbeat (5 s in the e2e systems): the polls wait for it.
vi.setConfig({ testTimeout: 90_000 });

let system: RunningSystem;
let fast: RegisteredHoster;
let slow: RegisteredHoster;
/** What one `ask` counts against tpm and included tokens: its prompt plus its max_tokens (5). */
let tokensPerAsk: number;

const MAX_TOKENS = 5;
/** Requests in one burst; the plans under test allow as many at a time (max_concurrent defaults to 5). */
const BURST = 12;
const PAUSED = {
  message: "Your access has been temporarily paused by the hoster.",
  type: "permission_error",
  param: null,
  code: "subscription_paused",
};

beforeAll(async () => {
  system = await startSystem({ edges: 2 });
  fast = await registerHoster(system, { name: "Fast Hoster" });
  // 1000-token answers at 20 tokens a second: a stream stays open until its client leaves.
  slow = await registerHoster(system, {
    name: "Slow Hoster",
    serverEnv: { DEMO_TOKENS_PER_SECOND: "20", DEMO_COMPLETION_TOKENS: "1000" },
  });
  // One answer tells what an `ask` counts: the demo answer is longer than max_tokens, so it uses
  // its whole worst case (and settlement gives none of it back to the minute's tpm).
  const { scopedKey } = await subscribe(await createPlan(fast, { pricing_model: "free" }));
  const res = await ask(system.url, scopedKey);
  const body = (await res.json()) as { usage: { total_tokens: number; completion_tokens: number } };
  expect(res.status, JSON.stringify(body)).toBe(200);
  const { usage } = body;
  expect(usage.completion_tokens).toBe(MAX_TOKENS);
  tokensPerAsk = usage.total_tokens;
});
afterAll(async () => {
  await system?.close();
  await fast?.server.close();
  await slow?.server.close();
});

async function createPlan(hoster: RegisteredHoster, body: Json): Promise<string> {
  const res = await apiCall(system.url, "POST", "/hosters/products", {
    cookie: hoster.cookie,
    body: { name: "Plan", ...body },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.product_id as string;
}

/** A new customer subscribed to the plan: its own key and the subscription's scoped key. */
async function subscribe(productId: string) {
  const { apiKey } = await signUp(system.url);
  const res = await apiCall(system.url, "POST", "/v1/subscriptions", { key: apiKey, body: { product_id: productId } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { apiKey, scopedKey: res.body.api_key as string, subscriptionId: res.body.subscription_id as string };
}

const ask = (url: string, key: string, model = "auto") =>
  postChat(url, key, { model, max_tokens: MAX_TOKENS, messages: [{ role: "user", content: "hi" }] });

interface Outcome {
  status: number;
  /** The refusal's body.error, or the answer's body. */
  body: Json;
}

async function outcomeOf(res: Response): Promise<Outcome> {
  const body = (await res.json()) as Json;
  return { status: res.status, body: res.status === 200 ? body : (body.error as Json) };
}

/**
 * Admits `limit` requests on two edges, and never one more: one request on each edge first (so
 * both edges' leases hold room of the limit), then `burst` at once split over both, of which at
 * most what is left is admitted and the rest refused 429 `code`. A burst may be refused while room
 * sits unused in the other edge's lease (an edge refused by billing refuses the account itself
 * until its next heartbeat reply), but no room is lost: asking round-robin before `deadline`
 * reaches the limit exactly, after which neither edge admits another. Returns the answers.
 */
async function admitsExactly(
  urls: string[],
  limit: number,
  send: (url: string) => Promise<Response>,
  refusal: { code: string; message: RegExp },
  { deadline = Date.now() + 20_000, burst = BURST }: { deadline?: number; burst?: number } = {},
): Promise<Outcome[]> {
  const answers: Outcome[] = [];
  for (const url of urls) {
    const warm = await outcomeOf(await send(url));
    expect(warm.status, JSON.stringify(warm.body)).toBe(200);
    answers.push(warm);
  }
  const outcomes = await Promise.all(
    Array.from({ length: burst }, async (_, i) => outcomeOf(await send(urls[i % 2]!))),
  );
  const burstAdmitted = outcomes.filter((o) => o.status === 200);
  expect(burstAdmitted.length, `admitted by the burst, ${urls.length} admitted before it`).toBeLessThanOrEqual(
    limit - urls.length,
  );
  expectRefusals(outcomes, refusal.code, refusal.message);
  answers.push(...burstAdmitted);
  for (let i = 0; answers.length < limit && Date.now() < deadline; i++) {
    const outcome = await outcomeOf(await send(urls[i % 2]!));
    if (outcome.status === 200) answers.push(outcome);
    else await new Promise((resolve) => setTimeout(resolve, 200));
  }
  expect(answers.length, "admitted in all").toBe(limit);
  for (const url of urls) {
    const refused = await outcomeOf(await send(url));
    expect(refused.status, JSON.stringify(refused.body)).toBe(429);
    expectRefusals([refused], refusal.code, refusal.message);
  }
  expect(Date.now()).toBeLessThan(deadline);
  return answers;
}

/**
 * The plans' minute windows are billing's UTC calendar minutes. A test that counts one minute's
 * admissions starts in its first 30 s (or waits for the next) and must end in the same minute (its
 * deadline): a test that straddled two minutes could rightly be admitted twice the limit.
 */
async function minuteDeadline(): Promise<number> {
  const intoMinute = Date.now() % 60_000;
  if (intoMinute > 30_000) await new Promise((resolve) => setTimeout(resolve, 60_000 - intoMinute + 100));
  return Date.now() - (Date.now() % 60_000) + 59_000;
}

/** Every refusal is a 429 with `code` and a matching message; the rest were answered. */
function expectRefusals(outcomes: Outcome[], code: string, message: RegExp) {
  for (const o of outcomes.filter((o) => o.status !== 200)) {
    expect(o.status, JSON.stringify(o.body)).toBe(429);
    expect(o.body).toMatchObject({ type: "rate_limit_error", code });
    expect(o.body.message).toMatch(message);
  }
}

const tokensOf = (answers: Outcome[]) =>
  answers.reduce((sum, o) => sum + (o.body.usage as { total_tokens: number }).total_tokens, 0);

describe("plan limits across two edges", () => {
  it("rpm: over both edges the plan's minute admits exactly its rpm", async () => {
    const RPM = 4;
    const plan = await createPlan(fast, { pricing_model: "free", rpm_limit: RPM, max_concurrent: BURST });
    const { scopedKey } = await subscribe(plan);
    const deadline = await minuteDeadline();
    await admitsExactly(
      system.urls,
      RPM,
      (url) => ask(url, scopedKey),
      { code: "rate_limit_exceeded", message: /4 requests per minute/ },
      { deadline },
    );
  });

  it("tpm: over both edges the plan's minute admits exactly its tpm in tokens", async () => {
    const tpm = 4 * tokensPerAsk;
    const plan = await createPlan(fast, { pricing_model: "free", tpm_limit: tpm, max_concurrent: BURST });
    const { scopedKey } = await subscribe(plan);
    const deadline = await minuteDeadline();
    const answers = await admitsExactly(
      system.urls,
      4,
      (url) => ask(url, scopedKey),
      { code: "rate_limit_exceeded", message: new RegExp(`${tpm} tokens per minute`) },
      { deadline },
    );
    // The answers' tokens are the minute's: exactly tpm, never more.
    expect(tokensOf(answers)).toBe(tpm);
  });

  it("included tokens: over both edges the period uses exactly its included tokens", async () => {
    // Large enough that each edge's lease holds a share of it (the sizing rule's two TTLs of demand).
    const ALLOWANCE = 30; // requests' worth of tokens
    const included = ALLOWANCE * tokensPerAsk;
    const burst = ALLOWANCE + 6;
    const plan = await createPlan(fast, {
      pricing_model: "subscription",
      monthly_price_usd: 0.5,
      included_tokens: included,
      max_concurrent: burst,
    });
    const { scopedKey } = await subscribe(plan);
    const answers = await admitsExactly(
      system.urls,
      ALLOWANCE,
      (url) => ask(url, scopedKey),
      {
        code: "included_tokens_exhausted",
        message: new RegExp(`${included} included tokens for the current period are used up`),
      },
      { burst },
    );
    expect(tokensOf(answers)).toBe(included);
    // Settled, billing counts the same, whichever edge served them.
    const usage = await waitForUsage<{ usage_30d: Json }>(
      system.url,
      scopedKey,
      (u) => u.usage_30d.total_requests === ALLOWANCE,
    );
    expect(usage.usage_30d.total_input_tokens + usage.usage_30d.total_output_tokens).toBe(included);
  });

  it("included tokens: the last ones, unused in one edge's lease, serve the other edge (recalled), not a 429", async () => {
    // So few that the first edge's grant holds them all (the sizing rule's two TTLs of demand).
    const ALLOWANCE = 4;
    const included = ALLOWANCE * tokensPerAsk;
    const plan = await createPlan(fast, {
      pricing_model: "subscription",
      monthly_price_usd: 0.5,
      included_tokens: included,
      max_concurrent: BURST,
    });
    const { scopedKey } = await subscribe(plan);
    // The cold path runs the bounded recall of other edges' unused room before any
    // 402/429; after one request 3 requests' tokens are left, so the second edge serves too.
    await admitsExactly(system.urls, ALLOWANCE, (url) => ask(url, scopedKey), {
      code: "included_tokens_exhausted",
      message: new RegExp(`${included} included tokens for the current period are used up`),
    });
  });

  it("max_concurrent: streams over both edges never run more than the plan allows at once", async () => {
    const MAX = 3;
    const plan = await createPlan(slow, { pricing_model: "free", max_concurrent: MAX });
    const { scopedKey } = await subscribe(plan);
    const refusal = { code: "concurrency_limit_exceeded", message: /3 requests at a time/ };
    /** Every request's controller, and the admitted streams' in the order they were admitted. */
    const aborts: AbortController[] = [];
    const open: AbortController[] = [];
    /** Starts a stream: an admitted one stays running (its first chunk read) until aborted. */
    const stream = async (url: string): Promise<Outcome> => {
      const abort = new AbortController();
      aborts.push(abort);
      const res = await postChat(
        url,
        scopedKey,
        { model: "auto", stream: true, messages: [{ role: "user", content: "Tell me a long story." }] },
        abort.signal,
      );
      if (res.status !== 200) return outcomeOf(res);
      open.push(abort);
      expect((await res.body!.getReader().read()).done).toBe(false);
      return { status: 200, body: {} };
    };
    /** Streams until one more is running (round-robin over both edges), within 20 s. */
    const oneMore = async () => {
      const before = open.length;
      const deadline = Date.now() + 20_000;
      for (let i = 0; open.length === before && Date.now() < deadline; i++) {
        const outcome = await stream(system.urls[i % 2]!);
        if (outcome.status !== 200) {
          expectRefusals([outcome], refusal.code, refusal.message);
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      }
      expect(open).toHaveLength(before + 1);
    };
    /** While MAX streams run, a stream on each edge (at once) is refused. */
    const full = async () => {
      const outcomes = await Promise.all(system.urls.map(stream));
      expect(outcomes.map((o) => o.status)).toEqual([429, 429]);
      expectRefusals(outcomes, refusal.code, refusal.message);
    };
    try {
      // One stream running on each edge: both edges' leases hold slots.
      for (const url of system.urls) expect((await stream(url)).status).toBe(200);
      // A burst over both edges while they run: at most the one slot left is taken.
      const outcomes = await Promise.all(Array.from({ length: BURST }, (_, i) => stream(system.urls[i % 2]!)));
      expect(outcomes.filter((o) => o.status === 200).length).toBeLessThanOrEqual(MAX - 2);
      expectRefusals(outcomes, refusal.code, refusal.message);
      // Slots lent to an edge and not used there are recalled: the streams reach MAX, and no more.
      if (open.length < MAX) await oneMore();
      expect(open).toHaveLength(MAX);
      await full();

      // One client leaves: its slot serves one new stream, on either edge, and not two.
      open.shift()!.abort();
      await oneMore();
      await full();
      expect(open).toHaveLength(MAX);
    } finally {
      for (const abort of aborts) abort.abort();
    }
  });
});

describe("a hoster's pause across two edges", () => {
  it("pause: the very next request on both edges is 403 with the exact message; resume serves both again", async () => {
    const plan = await createPlan(fast, {
      pricing_model: "subscription",
      monthly_price_usd: 0.5,
      included_tokens: 1_000_000,
    });
    const { scopedKey, subscriptionId } = await subscribe(plan);
    // Both edges hold the subscription's budget in their lease.
    for (const url of system.urls) expect((await ask(url, scopedKey)).status).toBe(200);

    // Paused through the second edge: the recall reaches the first before the hoster's answer.
    const paused = await apiCall(system.urls[1]!, "POST", `/hosters/subscribers/${subscriptionId}/pause`, {
      cookie: fast.cookie,
    });
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body).toMatchObject({ subscription_id: subscriptionId, status: "paused" });
    for (const url of [...system.urls, ...system.urls]) {
      const refused = await ask(url, scopedKey);
      expect(refused.status).toBe(403);
      expect(await refused.json()).toEqual({ error: PAUSED });
    }

    const resumed = await apiCall(system.urls[0]!, "POST", `/hosters/subscribers/${subscriptionId}/resume`, {
      cookie: fast.cookie,
    });
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
    expect(resumed.body).toMatchObject({ subscription_id: subscriptionId, status: "active" });
    for (const url of system.urls) {
      const served = await ask(url, scopedKey);
      expect(served.status, await served.clone().text()).toBe(200);
    }
  });
});

describe("the account's per-day limit across two edges", () => {
  const PER_DAY = 5;
  let daily: RunningSystem;
  beforeAll(async () => {
    daily = await startSystem({
      edges: 2,
      billing: { TIERS: JSON.stringify({ free: { limit_per_minute: 600, limit_per_day: PER_DAY } }) },
    });
  });
  afterAll(async () => {
    await daily?.close();
  });

  it("over both edges the account's day admits exactly its limit", async () => {
    // The day is billing's UTC calendar day: keep clear of midnight.
    const intoDay = Date.now() % 86_400_000;
    if (intoDay > 86_400_000 - 60_000) await new Promise((resolve) => setTimeout(resolve, 86_400_000 - intoDay + 100));
    const { apiKey } = await signUp(daily.url);
    await admitsExactly(daily.urls, PER_DAY, (url) => ask(url, apiKey, "demo-small"), {
      code: "rate_limit_exceeded",
      message: /5 requests per day/,
    });
    // Reports trail admission by at most one heartbeat; every edge's count is in the day's.
    await expect
      .poll(async () => (await apiCall(daily.urls[1]!, "GET", "/v1/usage", { key: apiKey })).body.rate_limits as Json, {
        timeout: 20_000,
      })
      .toMatchObject({ requests_today: PER_DAY, limit_per_day: PER_DAY, remaining_today: 0 });
  });
});
