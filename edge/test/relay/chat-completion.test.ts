import { getEventListeners } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import {
  CONTENT,
  eventJson,
  startRelayHarness,
  UPSTREAM_TOKEN,
  waitFor,
  type RelayHarness as Harness,
} from "./relay-harness.ts";

const DELIVERED = BigInt(countTextTokens(CONTENT.join("")));

let h: Harness;
beforeAll(async () => {
  h = await startRelayHarness();
});
afterAll(async () => {
  await h?.close();
});

/** Exactly one publish and one stored event for the request; returns it. */
async function theUsageEvent(request: RelayRequest): Promise<UsageCompleted> {
  await waitFor(
    () => h.published.filter((e) => e.requestId === request.requestId),
    (events) => events.length > 0,
  );
  await new Promise((resolve) => setTimeout(resolve, 150)); // a second publish would land by now
  expect(h.published.filter((e) => e.requestId === request.requestId)).toHaveLength(1);
  const stored = await h.storedEvents(request.requestId);
  expect(stored).toHaveLength(1);
  const event = stored[0]!;
  expect(event).toMatchObject({
    requestId: request.requestId,
    accountId: request.accountId,
    keyId: request.keyId,
    modelId: request.route!.modelId,
    provider: "local",
    hosterId: "",
    startedAt: new Date(Number(request.receivedAtMs)).toISOString(),
    // The edge's admission passes through to settlement.
    leaseId: request.leaseId,
    worstCaseMicros: request.worstCaseMicros,
    worstCaseTokens: request.worstCaseTokens,
    subscriptionId: request.subscriptionId,
  });
  expect(event.latencyMs >= 5n && event.latencyMs < 30_000n).toBe(true);
  return event;
}

function noSecretIn(...texts: unknown[]) {
  for (const text of texts) expect(JSON.stringify(text ?? "")).not.toContain(UPSTREAM_TOKEN);
}

describe("ChatCompletion, streaming caller", () => {
  it("relays chunks under the route's model name and sends the billed usage chunk when asked", async () => {
    const request = await h.chatRequest("Demo Small", { includeUsage: true }, { temperature: 0.3, n: 1, stop: ["zz"] });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const chunks = events.map(eventJson);
    expect(chunks.every((c) => c.model === "demo-small" && c.object === "chat.completion.chunk")).toBe(true);
    // Our id on every chunk, the upstream's replaced.
    expect(chunks.every((c) => c.id === `chatcmpl-${request.requestId}`)).toBe(true);
    const content = chunks
      .flatMap((c) => (c.choices as Array<{ delta: { content?: string } }>).map((ch) => ch.delta.content ?? ""))
      .join("");
    expect(content).toBe(CONTENT.join(""));
    // Upstream usage never reaches the caller as-is: only the final, billed usage chunk.
    const withUsage = chunks.filter((c) => "usage" in c);
    expect(withUsage).toHaveLength(1);
    expect(withUsage[0]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 },
      id: `chatcmpl-${request.requestId}`,
    });
    expect(chunks.at(-1)).toBe(withUsage[0]);

    const call = h.upstream.calls.at(-1)!;
    expect(call.authorization).toBe(`Bearer ${UPSTREAM_TOKEN}`);
    expect(call.body).toMatchObject({
      model: "ok",
      max_tokens: 100,
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.3,
      n: 1,
      stop: ["zz"],
    });

    const event = await theUsageEvent(request);
    expect(event).toMatchObject({
      inputTokens: 12n,
      outputTokens: 5n,
      success: true,
      errorCode: "",
      finishReason: "stop",
    });
    // From the edge's receipt (5 ms before the call) to the first chunk with a choice.
    expect(event.timeToFirstTokenMs! >= 5n && event.timeToFirstTokenMs! <= event.latencyMs).toBe(true);
  });

  it("sends no usage chunk without include_usage, and never passes max_completion_tokens on", async () => {
    const request = await h.chatRequest(
      "demo-small",
      { includeUsage: false, maxOutputTokens: 3n },
      {
        max_completion_tokens: 5000,
      },
    );
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const chunks = events.map(eventJson);
    expect(chunks.length).toBeGreaterThan(0);
    expect(chunks.some((c) => "usage" in c)).toBe(false);
    expect(chunks.every((c) => (c.choices as unknown[]).length > 0)).toBe(true);
    const body = h.upstream.calls.at(-1)!.body;
    expect(body.max_tokens).toBe(3);
    expect("max_completion_tokens" in body).toBe(false);
    // The upstream went past max_tokens by our count, well within the runaway guard's tolerance:
    // its answer arrives whole with its own finish_reason, billed no more than the cap.
    expect(
      chunks.flatMap((c) => (c.choices as Array<{ finish_reason: unknown }>).map((ch) => ch.finish_reason)),
    ).toEqual([null, null, null, null, null, "stop"]);
    const event = await theUsageEvent(request);
    expect(event).toMatchObject({ inputTokens: 12n, outputTokens: 3n, success: true });
  });
});

describe("ChatCompletion, non-streaming caller", () => {
  it("answers one assembled chat.completion with the billed usage", async () => {
    const request = await h.chatRequest("demo-small", { stream: false });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events).toHaveLength(1);
    expect(events[0]!.completion).toBeDefined();
    expect(eventJson(events[0]!)).toEqual({
      id: `chatcmpl-${request.requestId}`,
      object: "chat.completion",
      created: 1_700_000_000,
      model: "demo-small",
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: CONTENT.join(""), refusal: null },
          logprobs: null,
          finish_reason: "stop",
        },
      ],
      // No worst case was admitted (0): the request costs nothing (usage-cost.test.ts prices one).
      usage: {
        prompt_tokens: 12,
        completion_tokens: 5,
        total_tokens: 17,
        prompt_tokens_details: { cached_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0 },
        cost: 0,
      },
    });
    expect(await theUsageEvent(request)).toMatchObject({ inputTokens: 12n, outputTokens: 5n, success: true });
  });

  it("assembles streamed tool calls and bills their arguments", async () => {
    const request = await h.chatRequest("tooling", { stream: false, promptTokens: 50n });
    const { events } = await h.chat(request);
    const completion = eventJson(events[0]!);
    expect(completion.choices).toEqual([
      {
        index: 0,
        message: {
          role: "assistant",
          content: null,
          refusal: null,
          tool_calls: [
            { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          ],
        },
        logprobs: null,
        finish_reason: "tool_calls",
      },
    ]);
    const delivered = BigInt(countTextTokens('get_weather{"city":"Paris"}'));
    const billedOut = delivered < 9n ? delivered : 9n;
    expect(completion.usage).toEqual({
      prompt_tokens: 30,
      completion_tokens: Number(billedOut),
      total_tokens: 30 + Number(billedOut),
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
      cost: 0,
    });
    const event = await theUsageEvent(request);
    expect(event).toMatchObject({
      inputTokens: 30n,
      outputTokens: billedOut,
      success: true,
      finishReason: "tool_calls",
    });
    // A non-streamed answer's first token is when the model's first chunk reached the registry.
    expect(event.timeToFirstTokenMs).toBeDefined();
  });
});

describe("ChatCompletion, a prompt counted beside the answer", () => {
  it("waits for the count before the usage, streamed or not, and bills min(reported, counted)", async () => {
    for (const stream of [false, true]) {
      // Admission held on the prompt's byte bound; the count arrives after the upstream answered.
      let resolveCount!: (n: bigint) => void;
      const counted = new Promise<bigint>((resolve) => (resolveCount = resolve));
      const request = await h.chatRequest("tooling", { stream, includeUsage: true, promptTokens: counted });
      const relayed = h.chat(request);
      await new Promise((resolve) => setTimeout(resolve, 50));
      resolveCount(25n);
      const { events } = await relayed;
      const usage = eventJson(events.filter((e) => e.chunk ?? e.completion).at(-1)!).usage;
      // The upstream reported 30 prompt tokens; our count is 25.
      expect(usage).toMatchObject({ prompt_tokens: 25 });
      expect(await theUsageEvent(request)).toMatchObject({ inputTokens: 25n, reportedInputTokens: 30n, success: true });
    }
  });
});

describe("ChatCompletion, lying upstream usage", () => {
  it.each(["liar-huge", "liar-negative", "liar-garbage", "liar-float"])(
    "%s is clamped to the prompt count and the delivered tokens",
    async (model) => {
      const request = await h.chatRequest(model, { includeUsage: true });
      const { events, error } = await h.chat(request);
      expect(error).toBeUndefined();
      const usage = eventJson(events.at(-1)!).usage;
      expect(usage).toEqual({
        prompt_tokens: 20,
        completion_tokens: Number(DELIVERED),
        total_tokens: 20 + Number(DELIVERED),
        prompt_tokens_details: { cached_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0 },
        cost: 0,
      });
      expect(await theUsageEvent(request)).toMatchObject({ inputTokens: 20n, outputTokens: DELIVERED, success: true });
    },
  );
});

describe("ChatCompletion, an upstream claiming more cached or reasoning tokens than it billed", () => {
  it("clamps them to the billed input and output, in the answer and the usage event", async () => {
    const request = await h.chatRequest("liar-cached", { includeUsage: true });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const usage = eventJson(events.at(-1)!).usage as { completion_tokens: number };
    expect(usage).toMatchObject({
      prompt_tokens: 12,
      prompt_tokens_details: { cached_tokens: 12 },
      completion_tokens_details: { reasoning_tokens: usage.completion_tokens },
    });
    expect(await theUsageEvent(request)).toMatchObject({
      inputTokens: 12n,
      cachedInputTokens: 12n,
      reasoningTokens: BigInt(usage.completion_tokens),
      reportedCachedTokens: 1_000_000_000n,
    });
  });
});

describe("ChatCompletion failures", () => {
  it("turns an upstream 500 into upstream_error without its body or the token, billing nothing", async () => {
    const request = await h.chatRequest("broken");
    const { events, error } = await h.chat(request);
    expect(events).toEqual([]);
    expect(error?.httpStatus).toBe(502);
    const appError = error!;
    expect(appError.code).toBe("upstream_error");
    expect(appError.httpStatus).toBe(502);
    expect(appError.message).not.toMatch(/internal upstream detail/);
    noSecretIn(error?.message, appError.toBody());
    const event = await theUsageEvent(request);
    expect(event).toMatchObject({ success: false, errorCode: "upstream_error", inputTokens: 0n, outputTokens: 0n });
    // Nothing reached the caller: no first token; the answer was an error.
    expect(event).toMatchObject({ timeToFirstTokenMs: undefined, finishReason: "error" });
  });

  it("times out an upstream that never sends headers: upstream_timeout", async () => {
    const request = await h.chatRequest("hanging", { stream: false });
    const started = Date.now();
    const { error } = await h.chat(request);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(error?.httpStatus).toBe(504);
    const appError = error!;
    expect(appError.code).toBe("upstream_timeout");
    noSecretIn(appError.toBody());
    const event = await theUsageEvent(request);
    expect(event).toMatchObject({ success: false, errorCode: "upstream_timeout", inputTokens: 0n, outputTokens: 0n });
    await h.upstream.calls.at(-1)!.aborted; // and the upstream request was abandoned
  });

  it("ends a stream that goes idle after its first chunk with a final error event, billing what was sent", async () => {
    const request = await h.chatRequest("stalling");
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined(); // the stream had started: it ends normally
    const last = events.at(-1)!;
    expect(last.error).toEqual({ code: "upstream_timeout", message: "The model server did not answer in time." });
    expect(events.slice(0, -1).every((e) => e.chunk)).toBe(true);
    const event = await theUsageEvent(request);
    expect(event).toMatchObject({
      success: false,
      errorCode: "upstream_timeout",
      inputTokens: 20n,
      outputTokens: BigInt(countTextTokens(CONTENT[0]!)),
      finishReason: "error",
    });
    expect(event.timeToFirstTokenMs).toBeDefined();
  });

  it("aborts the upstream at once when the caller cancels, and still records the call", async () => {
    const request = await h.chatRequest("stalling");
    const before = h.upstream.calls.length;
    const { cancelled } = await h.chat(request, 2);
    expect(cancelled).toBe(true);
    const upstreamCall = await waitFor(
      () => h.upstream.calls[before],
      (c) => c !== undefined,
    );
    const abortedInTime = await Promise.race([
      upstreamCall!.aborted.then(() => true),
      new Promise((resolve) => setTimeout(() => resolve(false), 1_000)),
    ]);
    expect(abortedInTime).toBe(true); // well before the 1.5 s idle timeout
    const event = await theUsageEvent(request);
    expect(event).toMatchObject({
      success: false,
      errorCode: "client_cancelled",
      inputTokens: 20n,
      outputTokens: BigInt(countTextTokens(CONTENT[0]!)),
      finishReason: "",
    });
  });

  it("answers no_healthy_upstream for a route the catalog does not serve", async () => {
    const request = await h.chatRequest("demo-small");
    request.route = { ...request.route!, modelId: "retired-model" };
    const { error } = await h.chat(request);
    expect(error!.code).toBe("no_healthy_upstream");
    expect(await theUsageEvent(request)).toMatchObject({ success: false, errorCode: "no_healthy_upstream" });
  });

  it("never writes the upstream token to a log line", () => {
    expect(h.logLines.length).toBeGreaterThan(0);
    expect(h.logLines.join("\n")).not.toContain(UPSTREAM_TOKEN);
  });
});

describe("ChatCompletion against an unreachable upstream", () => {
  it("answers upstream_error when the connection is refused", async () => {
    const down = await startRelayHarness({ LOCAL_MODEL_URL: "http://127.0.0.1:9" });
    try {
      const request = await down.chatRequest("demo-small");
      const { error } = await down.chat(request);
      expect(error!.code).toBe("upstream_error");
      const stored = await down.storedEvents(request.requestId);
      expect(stored).toHaveLength(1);
      expect(stored[0]).toMatchObject({ success: false, errorCode: "upstream_error" });
    } finally {
      await down.close();
    }
  });
});

describe("upstream connections", () => {
  it("reuses one keep-alive connection for consecutive calls", async () => {
    const ports: Array<number | undefined> = [];
    for (let i = 0; i < 3; i++) {
      const { error } = await h.chat(await h.chatRequest("demo-small"));
      expect(error).toBeUndefined();
      ports.push(h.upstream.calls.at(-1)!.remotePort);
    }
    expect(new Set(ports).size).toBe(1);
  });
});

describe("ChatCompletion deadlines and shutdown", () => {
  it("cuts a stream at the total timeout, before the idle timeout would", async () => {
    const quick = await startRelayHarness({ UPSTREAM_TOTAL_TIMEOUT_MS: "600", UPSTREAM_IDLE_TIMEOUT_MS: "5000" });
    try {
      const request = await quick.chatRequest("stalling");
      const started = Date.now();
      const { events, error } = await quick.chat(request);
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(error).toBeUndefined();
      expect(events.at(-1)!.error?.code).toBe("upstream_timeout");
      const stored = await quick.storedEvents(request.requestId);
      expect(stored).toHaveLength(1);
      expect(stored[0]).toMatchObject({ success: false, errorCode: "upstream_timeout" });
    } finally {
      await quick.close();
    }
  });

  it("leaves no listener on the edge's long-lived signals once an answer ends, whole or failed", async () => {
    // The edge's cut is composed from signals that live as long as the process: a listener left on
    // it would keep every answer (its accumulator, its chunks) in memory for good.
    const edgeCut = new AbortController();
    const cut = AbortSignal.any([edgeCut.signal]);
    for (const model of ["Demo Small", "broken"]) {
      await h.chat(await h.chatRequest(model), undefined, { cut });
      await h.chat(await h.chatRequest(model, { stream: false }), undefined, { cut });
    }
    expect(getEventListeners(cut, "abort")).toEqual([]);
  });

  it("still records usage for a stream the edge cuts (its shutdown grace over), what was relayed billed", async () => {
    const request = await h.chatRequest("stalling");
    const cut = new AbortController();
    const running = h.chat(request, undefined, { cut: cut.signal });
    await waitFor(
      () => h.upstream.calls.length,
      (n) => n > 0,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    cut.abort();
    const { events, error } = await running;
    expect(error).toBeUndefined();
    expect(events.at(-1)!.error).toEqual({
      code: "service_unavailable",
      message: "The server is shutting down; please retry the request.",
    });
    const stored = await h.storedEvents(request.requestId);
    expect(stored).toHaveLength(1);
    // The edge cut it, not the client: recorded as what the client was told, billed what it got.
    expect(stored[0]).toMatchObject({
      success: false,
      errorCode: "service_unavailable",
      outputTokens: BigInt(countTextTokens(CONTENT[0]!)),
    });
  });
});
