import OpenAI, { APIError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import {
  ANSWER,
  MODES,
  startAdversarialUpstream,
  TOKEN_PIECE,
  UPSTREAM_SECRET,
  type AdversarialUpstream,
} from "../../services/registry/test/fixtures/adversarial-upstream.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// A hostile model server behind the whole system (edge → registry → billing): what a client sees
// when the upstream fails before or after the first byte, runs past max_tokens, or is abandoned
// by the client, and what billing settles for it.

let upstream: AdversarialUpstream;
let system: RunningSystem;
let db: BillingDb;

beforeAll(async () => {
  upstream = await startAdversarialUpstream({ tickMs: 40 });
  system = await startSystem({
    registry: {
      LOCAL_MODEL_URL: upstream.url,
      LOCAL_MODEL_TOKEN: upstream.token,
      LOCAL_MODELS: JSON.stringify(
        MODES.map((mode) => ({
          model_id: mode,
          context_window: 8192,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
          upstream_model: mode,
        })),
      ),
    },
    // The relay's bounds, short.
    edge: {
      UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "400",
      UPSTREAM_IDLE_TIMEOUT_MS: "400",
      UPSTREAM_TOTAL_TIMEOUT_MS: "3000",
    },
  });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await system?.close();
  await upstream?.close();
});

const sdk = (apiKey: string) => new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });
const ask = (model: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: "user", content: "Say hello" }],
  max_tokens: 200,
  ...extra,
});

/** The data payloads of an SSE body, in order. */
const sseEvents = (text: string) =>
  text
    .split("\n\n")
    .filter((frame) => frame.startsWith("data: "))
    .map((frame) => frame.slice("data: ".length));

/**
 * The settled request: its usage record and the worst case its settlement released from its
 * lease's hold (each test's account makes this one request, so that is its leases' settled sum).
 */
async function settled(requestId: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [record] = await db.query<{
      output_tokens: string;
      cost_micros: string;
      success: boolean;
      error_code: string;
      worst_case_micros: string;
    }>(
      `select output_tokens::text, cost_micros::text, success, error_code,
         (select coalesce(sum(settled_micros), 0)::text from leases l where l.account_id = u.account_id)
           as worst_case_micros
       from usage_records u where request_id = $1`,
      [requestId],
    );
    if (record) return record;
    if (Date.now() > deadline) throw new Error(`request ${requestId} never settled`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("before the first byte: the error table's status", () => {
  it.each([
    ["status-500", 502, "upstream_error"],
    ["silent", 504, "upstream_timeout"],
  ])("%s → %i %s, with no upstream detail, and nothing charged", async (model, status, code) => {
    const { apiKey } = await signUp(system.url);
    const res = await postChat(system.url, apiKey, ask(model, { stream: true }));
    expect(res.status).toBe(status);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({
      error: { message: expect.any(String), type: "api_error", param: null, code },
    });
    expect(text).not.toContain(UPSTREAM_SECRET);
    const record = await settled(res.headers.get("x-request-id")!);
    expect(record).toMatchObject({ success: false, error_code: code, output_tokens: "0", cost_micros: "0" });
  });

  it("the SDK raises the status's error class", async () => {
    const { apiKey } = await signUp(system.url);
    const failure = await sdk(apiKey)
      .chat.completions.create({ model: "garbage", messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(APIError);
    expect(failure).toMatchObject({ status: 502, code: "upstream_error", type: "api_error" });
  });
});

describe("after the first byte: a final SSE error event", () => {
  it("an upstream that dies mid-stream ends the stream with finish_reason error, billed for what was delivered", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await postChat(system.url, apiKey, ask("reset-mid", { stream: true }));
    expect(res.status).toBe(200);
    const events = sseEvents(await res.text());
    expect(events).not.toContain("[DONE]");
    const chunks = events.map((e) => JSON.parse(e) as Record<string, unknown>);
    const last = chunks.at(-1)!;
    expect(last).toMatchObject({
      choices: [{ index: 0, delta: {}, finish_reason: "error" }],
      error: { type: "api_error", code: "upstream_error" },
    });
    expect(JSON.stringify(last)).not.toContain(UPSTREAM_SECRET);
    const delivered = chunks
      .slice(0, -1)
      .map((c) => (c.choices as Array<{ delta: { content?: string } }>)[0]?.delta.content ?? "")
      .join("");
    expect(delivered).toBe(ANSWER[0]! + ANSWER[1]!);

    const record = await settled(res.headers.get("x-request-id")!);
    // Not zero, not the full worst case: the tokens the client received.
    expect(record).toMatchObject({
      success: false,
      error_code: "upstream_error",
      output_tokens: String(countTextTokens(delivered)),
    });
    expect(BigInt(record.cost_micros)).toBeGreaterThan(0n);
    expect(BigInt(record.cost_micros)).toBeLessThan(BigInt(record.worst_case_micros));
  });

  it("an empty answer that ended in an error costs 0 and shows as such in /v1/generations/{id}", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await postChat(system.url, apiKey, ask("error-event-first", { stream: true }));
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain(UPSTREAM_SECRET);
    const chunks = sseEvents(text).map((e) => JSON.parse(e) as { choices: Array<{ delta: { content?: string } }> });
    expect(chunks.at(-1)).toMatchObject({ choices: [{ finish_reason: "error" }], error: { code: "upstream_error" } });
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe("");
    const requestId = res.headers.get("x-request-id")!;
    // Its prompt was counted (the upstream answered 200 and read it), and still nothing is
    // charged or posted.
    const record = await settled(requestId);
    expect(record).toMatchObject({
      success: false,
      error_code: "upstream_error",
      output_tokens: "0",
      cost_micros: "0",
    });
    // Charged nothing: no entry settled it, per request or per batch.
    expect(await db.query(`select 1 from journal_entries where reference = $1`, [requestId])).toEqual([]);
    expect(await db.query(`select entry_id from usage_records where request_id = $1`, [requestId])).toEqual([
      { entry_id: null },
    ]);
    const generation = await fetch(`${system.url}/v1/generations/${requestId}`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    expect(generation.status).toBe(200);
    const shown = (await generation.json()) as { input_tokens: number };
    expect(shown).toMatchObject({ output_tokens: 0, cost_usd: 0, status: "failure", error_code: "upstream_error" });
    expect(shown.input_tokens).toBeGreaterThan(0);
  });

  it("the SDK yields the chunks, then raises the error event", async () => {
    const { apiKey } = await signUp(system.url);
    const stream = await sdk(apiKey).chat.completions.create({
      model: "stall-after-first",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
    });
    let text = "";
    const failure = await (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    })().catch((e: unknown) => e);
    expect(text).toBe(ANSWER[0]);
    expect(failure).toBeInstanceOf(APIError);
    expect(failure).toMatchObject({ code: "upstream_timeout" });
  });
});

describe("max_tokens, judged by the upstream; the gateway only guards against runaways", () => {
  it("an upstream that never stops is ended at 1.5 × max_tokens + 32 with finish_reason length, billed max_tokens", async () => {
    const { apiKey } = await signUp(system.url);
    const { data: stream, response } = await sdk(apiKey)
      .chat.completions.create({
        model: "forever",
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 15,
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    let text = "";
    const finishes: string[] = [];
    let usage: { completion_tokens: number } | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason);
      usage ??= chunk.usage;
    }
    // The runaway guard's default tolerance: 1.5 × 15 + 32 = 54 tokens by the gateway's count.
    expect(text).toBe(TOKEN_PIECE.repeat(54));
    expect(finishes).toEqual(["length"]);
    expect(usage?.completion_tokens).toBe(15);
    const record = await settled(response.headers.get("x-request-id")!);
    expect(record).toMatchObject({ success: true, output_tokens: "15" });
  });
});

describe("a client that goes away", () => {
  it("closes the upstream connection within a second and settles what was delivered", async () => {
    const { apiKey } = await signUp(system.url);
    const abort = new AbortController();
    const res = await postChat(system.url, apiKey, ask("forever-slow", { stream: true }), abort.signal);
    expect(res.status).toBe(200);
    const requestId = res.headers.get("x-request-id")!;
    const reader = res.body!.getReader();
    let received = "";
    while ((received.match(/"content":" token"/g) ?? []).length < 3) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the stream ended before three tokens");
      received += new TextDecoder().decode(value);
    }
    const abortedAt = Date.now();
    abort.abort();

    const call = upstream.last("forever-slow")!;
    const closedAt = await Promise.race([call.closedEarly, new Promise<number>((r) => setTimeout(() => r(-1), 1_000))]);
    expect(closedAt, "the upstream connection stayed open").toBeGreaterThan(0);
    expect(closedAt - abortedAt).toBeLessThan(1_000);

    const record = await settled(requestId);
    expect(record).toMatchObject({ success: false, error_code: "client_cancelled" });
    // At least the three tokens read, far below the 200 reserved.
    expect(Number(record.output_tokens)).toBeGreaterThanOrEqual(3);
    expect(Number(record.output_tokens)).toBeLessThan(50);
    expect(BigInt(record.cost_micros)).toBeGreaterThan(0n);
    expect(BigInt(record.cost_micros)).toBeLessThan(BigInt(record.worst_case_micros));
  });
});
