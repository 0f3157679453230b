import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { CONTENT, eventJson, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";

// The client's `models` fallbacks, as the edge passes them: routes after the first, tried in
// order while nothing has reached the caller. The fake upstream picks its behaviour by model
// (`broken` answers 500, `stalling` sends one chunk and goes silent, `demo-small` answers).

let h: Harness;
beforeAll(async () => {
  h = await startRelayHarness({ UPSTREAM_EJECT_AFTER_FAILURES: "1000", UPSTREAM_IDLE_TIMEOUT_MS: "300" });
});
afterAll(async () => {
  await h?.close();
});

async function usageOf(request: RelayRequest): Promise<UsageCompleted> {
  const events = await waitFor(
    () => h.published.filter((e) => e.requestId === request.requestId),
    (found) => found.length > 0,
  );
  expect(events).toHaveLength(1);
  return events[0]!;
}

/** A request for `first` with `fallbacks` after it, as the edge builds it for `models`. */
async function withFallbacks(first: string, fallbacks: string[], stream = true) {
  const request = await h.chatRequest(first, { stream }, { models: [first, ...fallbacks] });
  request.fallbackRoutes = await Promise.all(fallbacks.map((model) => h.route(model)));
  return request;
}

const callsFor = (requestBodyModel: string) => h.upstream.calls.filter((c) => c.body.model === requestBodyModel).length;

describe("fallback routes (the client's `models`)", () => {
  it("moves a request whose first model fails before the first byte to the next model, which the answer and usage name", async () => {
    const request = await withFallbacks("broken", ["demo-small"]);
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const chunks = events.map(eventJson) as Array<{ model: string; choices: Array<{ delta: { content?: string } }> }>;
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(CONTENT.join(""));
    expect(new Set(chunks.map((c) => c.model))).toEqual(new Set(["demo-small"]));
    // The gateway's list never reaches a model server.
    const sent = h.upstream.calls.slice(-2);
    expect(sent.map((c) => c.body.model)).toEqual(["fail500", "ok"]);
    expect(sent.every((c) => !("models" in c.body))).toBe(true);
    const usage = await usageOf(request);
    expect(usage).toMatchObject({ success: true, modelId: "demo-small", provider: "local" });
    expect(usage.outputTokens).toBeGreaterThan(0n);
  });

  it("moves a non-streamed request too", async () => {
    const request = await withFallbacks("broken", ["demo-small"], false);
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(eventJson(events[0]!)).toMatchObject({ model: "demo-small", object: "chat.completion" });
    expect((await usageOf(request)).modelId).toBe("demo-small");
  });

  it("passes over a model with no live server", async () => {
    const request = await withFallbacks("demo-small", []);
    // A route resolved earlier whose model has gone from the catalog since: no server to try.
    request.route = { ...request.route!, modelId: "retired-model" };
    request.fallbackRoutes = [await h.route("demo-small")];
    const { error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect((await usageOf(request)).modelId).toBe("demo-small");
  });

  it("never falls back once the first byte reached the caller", async () => {
    const answered = callsFor("ok");
    const request = await withFallbacks("stalling", ["demo-small"]);
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events.at(-1)?.error).toMatchObject({ code: "upstream_timeout" });
    expect(callsFor("ok")).toBe(answered);
    expect(await usageOf(request)).toMatchObject({
      success: false,
      modelId: "stalling",
      errorCode: "upstream_timeout",
    });
  });

  it("answers the last model's failure when every model fails, billing nothing", async () => {
    const request = await withFallbacks("broken", ["broken"]);
    request.fallbackRoutes = [{ ...request.fallbackRoutes[0]!, modelId: "retired-model" }];
    const { error } = await h.chat(request);
    expect(error!.code).toBe("no_healthy_upstream");
    expect(await usageOf(request)).toMatchObject({ success: false, inputTokens: 0n, outputTokens: 0n });
  });
});
