import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import type { HarnessEvent } from "./relay-harness.ts";
import { loadEdgeConfig } from "../../src/config.ts";
import { eventJson, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";
import {
  ANSWER,
  MODES,
  startAdversarialUpstream,
  TOKEN_PIECE,
  UPSTREAM_SECRET,
  type AdversarialMode,
  type AdversarialUpstream,
} from "../../../services/registry/test/fixtures/adversarial-upstream.ts";

// Small bounds so every misbehaviour is cut quickly; each test checks which bound cut it.
const LIMITS = {
  UPSTREAM_CONNECT_TIMEOUT_MS: "250",
  UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "300",
  UPSTREAM_IDLE_TIMEOUT_MS: "300",
  UPSTREAM_TOTAL_TIMEOUT_MS: "1200",
  UPSTREAM_MAX_RESPONSE_BYTES: String(256 * 1024),
};
const ANSWER_TOKENS = BigInt(countTextTokens(ANSWER.join("")));

/** One local model per misbehaviour; its upstream_model selects the mode. */
function adversarialEnv(upstream: AdversarialUpstream, extra: Record<string, string> = {}) {
  return {
    ...LIMITS,
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
    ...extra,
  };
}

let upstream: AdversarialUpstream;
let h: Harness;
beforeAll(async () => {
  upstream = await startAdversarialUpstream({ dripMs: 25, tickMs: 40 });
  h = await startRelayHarness(adversarialEnv(upstream));
});
afterAll(async () => {
  await h?.close();
  await upstream?.close();
});

/** The one usage event of a request. */
async function usageOf(harness: Harness, request: RelayRequest): Promise<UsageCompleted> {
  const events = await waitFor(
    () => harness.published.filter((e) => e.requestId === request.requestId),
    (found) => found.length > 0,
  );
  expect(events).toHaveLength(1);
  return events[0]!;
}

/** The upstream saw its connection closed (the gateway let go of it) within `ms`. */
async function upstreamClosedWithin(mode: AdversarialMode, ms: number, since = Date.now()): Promise<number> {
  const call = await waitFor(
    () => upstream.last(mode),
    (c) => c !== undefined,
  );
  const closedAt = await Promise.race([call!.closedEarly, new Promise<number>((r) => setTimeout(() => r(-1), ms))]);
  expect(closedAt, `the ${mode} upstream connection was not closed`).toBeGreaterThan(0);
  return closedAt - since;
}

const contentOf = (events: HarnessEvent[]) =>
  events
    .filter((e) => e.chunk)
    .map(eventJson)
    .flatMap((c) => (c.choices as Array<{ delta: { content?: string } }>).map((ch) => ch.delta.content ?? ""))
    .join("");

const finishReasons = (events: HarnessEvent[]) =>
  events
    .filter((e) => e.chunk)
    .map(eventJson)
    .flatMap((c) => (c.choices as Array<{ finish_reason: string | null }>).map((ch) => ch.finish_reason))
    .filter((f) => f !== null);

describe("an upstream that fails before the first byte: a status, nothing billed", () => {
  it.each<[AdversarialMode, string, number]>([
    ["silent", "upstream_timeout", 504], // first-byte bound
    ["headers-only", "upstream_timeout", 504], // headers are not the first byte
    ["reset", "upstream_error", 502],
    ["status-500", "upstream_error", 502],
    ["status-503", "upstream_error", 502],
    ["status-500-endless", "upstream_error", 502],
    ["html-200", "upstream_error", 502],
    ["garbage", "upstream_error", 502],
    ["invalid-json", "upstream_error", 502],
    ["not-object", "upstream_error", 502],
  ])("%s → %s (%i)", async (mode, code, httpStatus) => {
    const request = await h.chatRequest(mode);
    const started = Date.now();
    const { events, error } = await h.chat(request);
    expect(Date.now() - started).toBeLessThan(1_000); // before the total bound (1.2 s)
    expect(events).toEqual([]);
    const appError = error!;
    expect(appError).toMatchObject({ code, httpStatus });
    expect(JSON.stringify([appError.toBody()])).not.toContain(UPSTREAM_SECRET);
    expect(await usageOf(h, request)).toMatchObject({
      success: false,
      errorCode: code,
      inputTokens: 0n,
      outputTokens: 0n,
    });
  });

  it("cuts a byte-at-a-time drip at the first-byte bound: bytes that complete no event are no progress", async () => {
    const request = await h.chatRequest("drip");
    const started = Date.now();
    const { events, error } = await h.chat(request);
    // Were every dripped byte progress, only the total bound (1.2 s) would end it.
    expect(Date.now() - started).toBeLessThan(900);
    expect(events).toEqual([]);
    expect(error!).toMatchObject({ code: "upstream_timeout", httpStatus: 504 });
    expect(upstream.last("drip")!.bytesWritten).toBeGreaterThan(0);
    await upstreamClosedWithin("drip", 1_000);
    expect(await usageOf(h, request)).toMatchObject({ success: false, errorCode: "upstream_timeout" });
  });

  it("cuts an endless body with no event in it at the response size limit", async () => {
    const request = await h.chatRequest("endless-body");
    const { events, error } = await h.chat(request);
    expect(events).toEqual([]);
    // upstream_error, not the first-byte timeout a limitless read would end in.
    expect(error!).toMatchObject({ code: "upstream_error", httpStatus: 502 });
    await upstreamClosedWithin("endless-body", 1_000);
    // Socket buffers hold a few MiB at most: the rest of the "multi-GB" body was never sent.
    expect(upstream.last("endless-body")!.bytesWritten).toBeLessThan(32 * 1024 * 1024);
    expect(await usageOf(h, request)).toMatchObject({ success: false, errorCode: "upstream_error", outputTokens: 0n });
  });

  it("answers a non-streaming caller's failure the same way (it is served from a stream too)", async () => {
    const request = await h.chatRequest("stall-after-first", { stream: false });
    const { events, error } = await h.chat(request);
    expect(events).toEqual([]);
    expect(error!).toMatchObject({ code: "upstream_timeout", httpStatus: 504 });
    // Nothing reached the caller, so nothing is billed.
    expect(await usageOf(h, request)).toMatchObject({ success: false, inputTokens: 0n, outputTokens: 0n });
  });
});

describe("an upstream that fails after the first byte: a final error event, billed for what was delivered", () => {
  /** Runs a streaming request that must end with one error event after some chunks. */
  async function cutMidStream(mode: AdversarialMode, code: string) {
    const request = await h.chatRequest(mode);
    const started = Date.now();
    const { events, error } = await h.chat(request);
    const elapsed = Date.now() - started;
    expect(error).toBeUndefined(); // the call itself ends normally: the caller already has a 200
    expect(events.length).toBeGreaterThan(1);
    expect(events.slice(0, -1).every((e) => e.chunk)).toBe(true);
    expect(events.at(-1)!.error?.code).toBe(code);
    expect(JSON.stringify(events.at(-1))).not.toContain(UPSTREAM_SECRET);
    const delivered = contentOf(events);
    const usage = await usageOf(h, request);
    expect(usage).toMatchObject({ success: false, errorCode: code, inputTokens: request.promptTokens });
    return { delivered, usage, elapsed, request };
  }

  it("reset mid-stream: upstream_error, billed for the delivered tokens", async () => {
    const { delivered, usage } = await cutMidStream("reset-mid", "upstream_error");
    expect(delivered).toBe(ANSWER[0]! + ANSWER[1]!);
    expect(usage.outputTokens).toBe(BigInt(countTextTokens(delivered)));
    expect(usage.outputTokens).toBeGreaterThan(0n);
  });

  it("an answer that stops without a finish_reason: upstream_error, never a silent truncation", async () => {
    const { delivered, usage } = await cutMidStream("no-finish", "upstream_error");
    expect(delivered).toBe(ANSWER.join(""));
    expect(usage.outputTokens).toBe(ANSWER_TOKENS);
  });

  it.each<AdversarialMode>(["invalid-json-mid", "error-event-mid"])("%s: upstream_error", async (mode) => {
    const { delivered, usage } = await cutMidStream(mode, "upstream_error");
    expect(delivered).toBe(ANSWER[0]);
    expect(usage.outputTokens).toBe(BigInt(countTextTokens(ANSWER[0]!)));
  });

  it("silence after the first chunks: cut at the idle bound", async () => {
    const { delivered, usage, elapsed } = await cutMidStream("stall-after-first", "upstream_timeout");
    expect(elapsed).toBeLessThan(900);
    expect(usage.outputTokens).toBe(BigInt(countTextTokens(delivered)));
    await upstreamClosedWithin("stall-after-first", 1_000);
  });

  it("a drip after the first chunks: cut at the idle bound, not the total one", async () => {
    const { usage, elapsed } = await cutMidStream("drip-after-first", "upstream_timeout");
    // Were every dripped byte progress, only the total bound (1.2 s) would end it.
    expect(elapsed).toBeLessThan(900);
    expect(usage.outputTokens).toBe(BigInt(countTextTokens(ANSWER[0]!)));
    await upstreamClosedWithin("drip-after-first", 1_000);
  });

  it("a slow endless stream under the runaway guard's limit: cut at the total bound", async () => {
    const { delivered, usage, elapsed } = await cutMidStream("forever-slow", "upstream_timeout");
    expect(elapsed).toBeGreaterThanOrEqual(1_100);
    expect(elapsed).toBeLessThan(3_000);
    // Billed for what was delivered: not zero, not the admitted cap of 100 tokens.
    expect(usage.outputTokens).toBe(BigInt(countTextTokens(delivered)));
    expect(usage.outputTokens).toBeGreaterThan(3n);
    expect(usage.outputTokens).toBeLessThan(100n);
    await upstreamClosedWithin("forever-slow", 1_000);
  });

  it("an endless body of text-free chunks: cut at the response size limit", async () => {
    const { usage } = await cutMidStream("forever-empty", "upstream_error");
    expect(usage.outputTokens).toBe(0n);
    await upstreamClosedWithin("forever-empty", 1_000);
    expect(upstream.last("forever-empty")!.bytesWritten).toBeLessThan(32 * 1024 * 1024);
  });
});

describe("the runaway guard: max_tokens is the upstream's to judge, the gateway cuts only past a tolerance", () => {
  // The defaults: a choice may run to 1.5 × cap + 32 tokens by the gateway's count.
  const guard = (cap: number) => Math.floor(cap * 1.5) + 32;

  it("ends an endless stream at the tolerance with finish_reason length, billing at most the cap", async () => {
    const request = await h.chatRequest("forever", { maxOutputTokens: 20n, includeUsage: true });
    const started = Date.now();
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events.every((e) => e.chunk)).toBe(true); // no error event: a proper end
    expect(contentOf(events)).toBe(TOKEN_PIECE.repeat(guard(20)));
    expect(finishReasons(events)).toEqual(["length"]);
    expect(eventJson(events.at(-1)!).usage).toMatchObject({ completion_tokens: 20 });
    expect(await upstreamClosedWithin("forever", 1_000, started)).toBeLessThan(1_000);
    expect(await usageOf(h, request)).toMatchObject({ success: true, errorCode: "", outputTokens: 20n });
    // One line says so, naming the model and the cap, never the upstream's address or token.
    const lines = h.logLines.filter((l) => l.includes("runaway guard") && l.includes(request.requestId));
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ provider: "local", modelId: "forever", maxTokens: 20 });
    expect(lines[0]).not.toContain(upstream.token);
    expect(lines[0]).not.toContain(upstream.url);
  });

  it("answers a non-streaming caller with the text up to the tolerance, billed at the cap", async () => {
    const request = await h.chatRequest("forever", { maxOutputTokens: 7n, stream: false });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const completion = eventJson(events[0]!) as { choices: Array<{ message: { content: string } }> };
    expect(completion).toMatchObject({
      choices: [{ finish_reason: "length", message: { content: TOKEN_PIECE.repeat(guard(7)) } }],
      usage: { completion_tokens: 7 },
    });
    expect(await usageOf(h, request)).toMatchObject({ success: true, outputTokens: 7n });
  });

  it("cuts one overlong chunk to the tokens left below the tolerance", async () => {
    const request = await h.chatRequest("overlong-chunk", { maxOutputTokens: 12n });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(contentOf(events)).toBe(TOKEN_PIECE.repeat(guard(12)));
    expect(finishReasons(events)).toEqual(["length"]);
    expect(await usageOf(h, request)).toMatchObject({ success: true, outputTokens: 12n });
  });

  it("leaves an honest answer that ends exactly at the cap alone", async () => {
    const request = await h.chatRequest("ok", { maxOutputTokens: ANSWER_TOKENS });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(contentOf(events)).toBe(ANSWER.join(""));
    expect(finishReasons(events)).toEqual(["stop"]);
    expect(await usageOf(h, request)).toMatchObject({ success: true, outputTokens: ANSWER_TOKENS });
  });

  it("relays an answer the upstream ended past the cap by our count whole, with its finish_reason, billed at the cap", async () => {
    // What an upstream whose tokenizer counts fewer tokens than ours looks like from here.
    const request = await h.chatRequest("ok", { maxOutputTokens: 2n, includeUsage: true });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(contentOf(events)).toBe(ANSWER.join(""));
    expect(finishReasons(events)).toEqual(["stop"]);
    expect(eventJson(events.at(-1)!).usage).toMatchObject({ completion_tokens: 2 });
    expect(await usageOf(h, request)).toMatchObject({ success: true, outputTokens: 2n });
  });

  it("follows OUTPUT_RUNAWAY_RATIO and OUTPUT_RUNAWAY_SLACK_TOKENS", async () => {
    const strict = await startRelayHarness(
      adversarialEnv(upstream, { OUTPUT_RUNAWAY_RATIO: "2", OUTPUT_RUNAWAY_SLACK_TOKENS: "0" }),
    );
    try {
      const request = await strict.chatRequest("forever", { maxOutputTokens: 10n });
      const { events, error } = await strict.chat(request);
      expect(error).toBeUndefined();
      expect(contentOf(events)).toBe(TOKEN_PIECE.repeat(20));
      expect(finishReasons(events)).toEqual(["length"]);
      expect(await usageOf(strict, request)).toMatchObject({ success: true, outputTokens: 10n });
    } finally {
      await strict.close();
    }
  });
});

describe("usage an upstream lies about", () => {
  it.each<AdversarialMode>([
    "usage-negative",
    "usage-huge",
    "usage-nan",
    "usage-infinite",
    "usage-string",
    "usage-more-than-sent",
  ])("%s is billed from the gateway's own counts", async (mode) => {
    const request = await h.chatRequest(mode, { includeUsage: true, promptTokens: 20n });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events.every((e) => e.chunk)).toBe(true);
    expect(contentOf(events)).toBe(ANSWER.join(""));
    expect(eventJson(events.at(-1)!).usage).toEqual({
      prompt_tokens: 20,
      completion_tokens: Number(ANSWER_TOKENS),
      total_tokens: 20 + Number(ANSWER_TOKENS),
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
      cost: 0,
    });
    expect(await usageOf(h, request)).toMatchObject({
      success: true,
      inputTokens: 20n,
      outputTokens: ANSWER_TOKENS,
    });
  });
});

describe("a caller that goes away", () => {
  it("closes the upstream connection within a second and bills what was delivered", async () => {
    const request = await h.chatRequest("forever-slow");
    const { events, cancelled } = await h.chat(request, 4);
    const cancelledAt = Date.now();
    expect(cancelled).toBe(true);
    expect(await upstreamClosedWithin("forever-slow", 1_000, cancelledAt)).toBeLessThan(1_000);
    const usage = await usageOf(h, request);
    expect(usage).toMatchObject({ success: false, errorCode: "client_cancelled", inputTokens: 20n });
    // At least what the caller read; at most what the registry relayed before the cancel landed.
    expect(usage.outputTokens).toBeGreaterThanOrEqual(BigInt(countTextTokens(contentOf(events))));
    expect(usage.outputTokens).toBeGreaterThan(0n);
    expect(usage.outputTokens).toBeLessThan(100n);
  });
});

describe("connection-level misbehaviour", () => {
  it("a refused connection is upstream_error (502)", async () => {
    const refused = await startRelayHarness(adversarialEnv(upstream, { LOCAL_MODEL_URL: upstream.refusedUrl }));
    try {
      const request = await refused.chatRequest("ok");
      const { error } = await refused.chat(request);
      expect(error!).toMatchObject({ code: "upstream_error", httpStatus: 502 });
      expect(await usageOf(refused, request)).toMatchObject({ success: false, errorCode: "upstream_error" });
    } finally {
      await refused.close();
    }
  });

  it("a connection that never completes its handshake is cut at the connect bound (504)", async () => {
    // The first-byte bound is long here, so only the connect bound can end the call this soon.
    const silent = await startRelayHarness(
      adversarialEnv(upstream, { LOCAL_MODEL_URL: upstream.silentTlsUrl, UPSTREAM_FIRST_BYTE_TIMEOUT_MS: "5000" }),
    );
    try {
      const request = await silent.chatRequest("ok");
      const started = Date.now();
      const { error } = await silent.chat(request);
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(error?.httpStatus).toBe(504);
      expect(error!).toMatchObject({ code: "upstream_timeout", httpStatus: 504 });
      expect(await usageOf(silent, request)).toMatchObject({ success: false, errorCode: "upstream_timeout" });
    } finally {
      await silent.close();
    }
  });
});

describe("the reference answer", () => {
  it("an honest upstream is relayed whole and billed from its report", async () => {
    const request = await h.chatRequest("ok", { includeUsage: true });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(contentOf(events)).toBe(ANSWER.join(""));
    expect(finishReasons(events)).toEqual(["stop"]);
    expect(await usageOf(h, request)).toMatchObject({ success: true, outputTokens: ANSWER_TOKENS });
  });
});

describe("the limits' configuration", () => {
  const base = { ADMIN_TOKEN: "mk_admin_0123456789abcdef0123456789", TLS_MODE: "off" };

  it("defaults to the documented values (docs/configuration.md, Upstream limits)", () => {
    expect(loadEdgeConfig(base)).toMatchObject({
      UPSTREAM_CONNECT_TIMEOUT_MS: 5_000,
      UPSTREAM_FIRST_BYTE_TIMEOUT_MS: 30_000,
      UPSTREAM_IDLE_TIMEOUT_MS: 30_000,
      UPSTREAM_TOTAL_TIMEOUT_MS: 600_000,
      UPSTREAM_MAX_RESPONSE_BYTES: 32 * 1024 * 1024,
    });
  });

  it.each([
    ["UPSTREAM_MAX_RESPONSE_BYTES", "0"],
    ["UPSTREAM_MAX_RESPONSE_BYTES", "16mb"],
    ["UPSTREAM_IDLE_TIMEOUT_MS", "-1"],
  ])("refuses %s=%s at start, naming the variable", (name, value) => {
    expect(() => loadEdgeConfig({ ...base, [name]: value })).toThrow(new RegExp(name));
  });
});
