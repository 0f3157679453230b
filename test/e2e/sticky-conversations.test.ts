import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RECENT_FAULT_MS } from "../../edge/src/relay/outlier-tracker.ts";
import { STICKY_PROMPT_CHARS } from "../../edge/src/routing/sticky-key.ts";
import { waitFor } from "../../services/registry/test/registry-harness.ts";
import { apiCall, type Json } from "./api-call.ts";
import { failingHoster } from "./failing-hoster.ts";
import { REQUEST_CHARGE_SQL } from "../../services/billing/test/billing-harness.ts";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { registerOpenHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Conversations on an open model stay on one endpoint (docs/routing.md, "Sticky conversations"):
// by prompt_cache_key or a long prompt's head, on every edge, on all three chat-shaped APIs;
// distinct conversations still spread by the default rule's shares; a failing endpoint passes the
// conversation to its next endpoint until it is back in its tier.

const STICKY = "acme/sticky-8b";
const TURNS = 6;

/** A real hoster-server behind a proxy that answers its chat requests 500 while `failing` is on. */
const switchableServer = (modelId: string) => failingHoster(modelId, (state) => state.failing);

let system: RunningSystem;
let apiKey: string;
let db: BillingDb;
/** Each hoster's plan prices in micro-USD per 1M tokens, its cached input at a tenth. */
const PLAN_PRICES = new Map<RegisteredHoster, { input: bigint; cached: bigint; output: bigint }>();
const hosters: RegisteredHoster[] = [];
const servers: Array<Awaited<ReturnType<typeof switchableServer>>> = [];
/** The hoster whose model answered, by the answer's `model` (each hoster's own model id). */
const hosterOf = (model: unknown) => hosters.find((h) => h.modelId === model);
const serverOf = (hoster: RegisteredHoster) => servers[hosters.indexOf(hoster)]!;

beforeAll(async () => {
  // Room for 500 conversations in a minute; verification only when a test says, so the servers
  // see only the conversations' traffic.
  system = await startSystem({
    edges: 2,
    billing: { TIERS: JSON.stringify({ free: { limit_per_minute: 5_000, limit_per_day: 50_000 } }) },
    registry: { VERIFY_INTERVAL_MS: "86400000" },
  });
  apiKey = (await signUp(system.url)).apiKey;
  db = await openBillingDb(system.databaseUrl);
  // At 1, 2 and 4 USD per 1M tokens (input and output together): shares 16/21, 4/21 and 1/21.
  for (const [name, price] of [
    ["One Dollar", 1],
    ["Two Dollars", 2],
    ["Four Dollars", 4],
  ] as const) {
    const modelId = `sticky-${price}`;
    const server = await switchableServer(modelId);
    servers.push(server);
    const hoster = await registerOpenHoster(system, {
      name,
      canonicalId: STICKY,
      modelId,
      onServer: server,
      plan: {
        input_price_per_1m_usd: price / 2,
        cached_input_price_per_1m_usd: price / 20,
        output_price_per_1m_usd: price / 2,
        rpm_limit: 5_000,
        tpm_limit: 1_000_000,
        max_concurrent: 50,
      },
    });
    hosters.push(hoster);
    const half = BigInt(price) * 500_000n;
    PLAN_PRICES.set(hoster, { input: half, cached: half / 10n, output: half });
  }
  // Every edge has all three endpoints once each answers a request pinned to it.
  for (const url of system.urls) {
    for (const hoster of hosters) {
      await waitFor(
        () => chat(url, { messages: [{ role: "user", content: "hi" }], provider: { only: [hoster.hosterId] } }),
        (res) => res.status === 200,
      );
    }
  }
});
afterAll(async () => {
  for (const hoster of hosters) await hoster.server.close();
  for (const server of servers) await server.close();
  await db?.close();
  await system?.close();
});

function chat(url: string, body: Json) {
  return apiCall(url, "POST", "/v1/chat/completions", {
    key: apiKey,
    body: { model: STICKY, max_tokens: 4, ...body },
  });
}

/** A long system prompt (its conversation is sticky without a key), distinct per `topic`. */
const longSystem = (topic: string) =>
  `You review the ${topic} project. ` +
  "Read the code carefully and answer briefly. ".repeat(Math.ceil(STICKY_PROMPT_CHARS / 40));

/** One chat conversation: each turn resends the whole conversation so far, as clients do. */
function conversation(opening: { prompt_cache_key?: string; system?: string }) {
  const messages: Json[] = opening.system ? [{ role: "system", content: opening.system }] : [];
  let turn = 0;
  return async (url = system.url) => {
    messages.push({ role: "user", content: `Question ${++turn}: what next?` });
    const res = await chat(url, {
      messages,
      ...(opening.prompt_cache_key && { prompt_cache_key: opening.prompt_cache_key }),
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    messages.push({ role: "assistant", content: res.body.choices[0].message.content });
    const hoster = hosterOf(res.body.model);
    if (!hoster) throw new Error(`answered by an unknown model: ${res.body.model}`);
    return { id: res.body.id as string, hoster, usage: res.body.usage as Json };
  };
}

/**
 * Opens conversations (one turn each) until one began on each hoster, so each hoster's
 * stickiness is shown (a conversation on the cheapest one would mostly stay there by chance).
 */
async function oneConversationPerHoster(opening: (i: number) => { prompt_cache_key?: string; system?: string }) {
  const found = new Map<RegisteredHoster, ReturnType<typeof conversation>>();
  for (let i = 0; found.size < hosters.length; i++) {
    expect(i, "no conversation began on some hoster in 200 tries").toBeLessThan(200);
    const next = conversation(opening(i));
    const { hoster } = await next();
    if (!found.has(hoster)) found.set(hoster, next);
  }
  return found;
}

/**
 * Turns 2 to 6 of each conversation, alternating between the edges: each served by the hoster
 * that served the first, each a cache hit there (its server saw the conversation's head), charged
 * by the cost rule at that hoster's cached price to the micro-dollar in the answer's usage.cost,
 * the generation and the ledger.
 */
async function laterTurns(conversations: Map<RegisteredHoster, ReturnType<typeof conversation>>) {
  for (const [hoster, next] of conversations) {
    for (let turn = 2; turn <= TURNS; turn++) {
      const served = await next(system.urls[turn % system.urls.length]);
      expect(served.hoster.modelId, `turn ${turn}`).toBe(hoster.modelId);
      const cached = served.usage.prompt_tokens_details.cached_tokens as number;
      expect(cached, `turn ${turn}`).toBeGreaterThan(0);
      const prices = PLAN_PRICES.get(hoster)!;
      const scaled =
        BigInt(served.usage.prompt_tokens - cached) * prices.input +
        BigInt(cached) * prices.cached +
        BigInt(served.usage.completion_tokens) * prices.output;
      const cost = (scaled + 999_999n) / 1_000_000n;
      expect(served.usage.cost, `turn ${turn}`).toBe(Number(cost) / 1_000_000);
      const generation = await waitFor(
        () => apiCall(system.url, "GET", `/v1/generations/${served.id}`, { key: apiKey }),
        (res) => res.status === 200,
      );
      expect(generation.body, `turn ${turn}`).toMatchObject({
        hoster_id: hoster.hosterId,
        cached_tokens: cached,
        cost_usd: Number(cost) / 1_000_000,
      });
      // Its record's cost, in its batch entry's customer leg.
      const charged = await db.figure(REQUEST_CHARGE_SQL, [served.id.replace(/^chatcmpl-/, "")]);
      expect(charged, `turn ${turn}`).toBe(cost);
    }
  }
}

describe("sticky conversations on an open model with three endpoints", () => {
  it("serves all six turns of a conversation with prompt_cache_key from one endpoint, on either edge", async () => {
    await laterTurns(await oneConversationPerHoster((i) => ({ prompt_cache_key: `codex-session-${i}` })));
  });

  it("serves all six turns of a conversation with a long system prompt and no key from one endpoint", async () => {
    await laterTurns(await oneConversationPerHoster((i) => ({ system: longSystem(`service-${i}`) })));
  });

  it("keeps a conversation on one endpoint through /v1/responses and /v1/messages too", async () => {
    for (let i = 0; i < 3; i++) {
      const served = new Set<unknown>();
      for (let turn = 0; turn < 3; turn++) {
        const responses = await apiCall(system.urls[turn % 2]!, "POST", "/v1/responses", {
          key: apiKey,
          body: { model: STICKY, input: `turn ${turn}`, max_output_tokens: 16, prompt_cache_key: `responses-${i}` },
        });
        expect(responses.status, JSON.stringify(responses.body)).toBe(200);
        served.add(responses.body.model);
      }
      expect(served.size).toBe(1);
    }
    for (let i = 0; i < 3; i++) {
      const served = new Set<unknown>();
      const messages: Json[] = [];
      for (let turn = 0; turn < 3; turn++) {
        messages.push({ role: "user", content: `Question ${turn}` });
        const answer = await apiCall(system.urls[turn % 2]!, "POST", "/v1/messages", {
          key: apiKey,
          body: { model: STICKY, max_tokens: 16, system: longSystem(`messages-${i}`), messages },
        });
        expect(answer.status, JSON.stringify(answer.body)).toBe(200);
        messages.push({ role: "assistant", content: answer.body.content });
        served.add(answer.body.model);
      }
      expect(served.size).toBe(1);
    }
  });

  it("routes a conversation to the same endpoint whichever API carries it, on either edge", async () => {
    // The order is drawn once per request from the one sticky key of the chat body every API
    // translates onto: Messages' system and first user message are chat's system and first user
    // message; Responses' prompt_cache_key is chat's.
    const endpoints = new Set<unknown>();
    // Until conversations began on two endpoints at least, so the agreement is not the cheapest
    // endpoint's 16/21 by chance alone.
    for (let i = 0; i < 6 || endpoints.size < 2; i++) {
      expect(i, "every conversation began on one endpoint in 100 tries").toBeLessThan(100);
      const head = longSystem(`shared-${i}`);
      const question = `Question about part ${i}`;
      const chatAnswer = await chat(system.urls[i % 2]!, {
        messages: [
          { role: "system", content: head },
          { role: "user", content: question },
        ],
      });
      expect(chatAnswer.status, JSON.stringify(chatAnswer.body)).toBe(200);
      const messagesAnswer = await apiCall(system.urls[(i + 1) % 2]!, "POST", "/v1/messages", {
        key: apiKey,
        body: { model: STICKY, max_tokens: 16, system: head, messages: [{ role: "user", content: question }] },
      });
      expect(messagesAnswer.status, JSON.stringify(messagesAnswer.body)).toBe(200);
      expect(messagesAnswer.body.model, `conversation ${i}`).toBe(chatAnswer.body.model);
      endpoints.add(chatAnswer.body.model);

      const keyed = await chat(system.urls[i % 2]!, {
        messages: [{ role: "user", content: "hello" }],
        prompt_cache_key: `shared-key-${i}`,
      });
      expect(keyed.status, JSON.stringify(keyed.body)).toBe(200);
      const responsesAnswer = await apiCall(system.urls[(i + 1) % 2]!, "POST", "/v1/responses", {
        key: apiKey,
        body: { model: STICKY, input: "hello", max_output_tokens: 16, prompt_cache_key: `shared-key-${i}` },
      });
      expect(responsesAnswer.status, JSON.stringify(responsesAnswer.body)).toBe(200);
      expect(responsesAnswer.body.model, `keyed conversation ${i}`).toBe(keyed.body.model);
    }
  });

  it("spreads 500 distinct conversations by the default rule: 16/21, 4/21 and 1/21", async () => {
    const counts = new Map<string, number>();
    const total = 500;
    let next = 0;
    const worker = async () => {
      while (next < total) {
        const i = next++;
        const res = await chat(system.urls[i % 2]!, {
          messages: [{ role: "user", content: "hello" }],
          prompt_cache_key: `spread-${i}`,
        });
        expect(res.status).toBe(200);
        counts.set(res.body.model as string, (counts.get(res.body.model as string) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    const share = (i: number) => (counts.get(hosters[i]!.modelId) ?? 0) / total;
    expect([...counts.keys()].sort()).toEqual(hosters.map((h) => h.modelId).sort());
    expect(Math.abs(share(0) - 16 / 21)).toBeLessThan(0.07);
    expect(Math.abs(share(1) - 4 / 21)).toBeLessThan(0.07);
    expect(Math.abs(share(2) - 1 / 21)).toBeLessThan(0.07);
  });

  it(
    "moves a conversation to its next endpoint while its own fails, and back once the fault window passes",
    { timeout: 120_000 },
    async () => {
      // One edge: the recent-fault tier is each edge's own (what this edge saw fail).
      const url = system.url;
      const next = conversation({ prompt_cache_key: "failover-session" });
      const first = (await next(url)).hoster;
      expect((await next(url)).hoster).toBe(first);

      const failing = serverOf(first);
      failing.state.failing = true;
      const moved = await next(url);
      const failedAt = Date.now();
      expect(moved.hoster).not.toBe(first);
      // While the first is out of its tier it is not even tried: the next one serves every turn.
      const chatsWhileOut = failing.state.chats;
      for (let turn = 0; turn < 3; turn++) expect((await next(url)).hoster).toBe(moved.hoster);
      expect(failing.state.chats).toBe(chatsWhileOut);

      // Healthy again; the edge puts it back in its tier RECENT_FAULT_MS after its last fault.
      failing.state.failing = false;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, failedAt + RECENT_FAULT_MS + 500 - Date.now())));
      for (let turn = 0; turn < 3; turn++) expect((await next(url)).hoster).toBe(first);
    },
  );
});
