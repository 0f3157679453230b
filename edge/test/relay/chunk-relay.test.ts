import { describe, expect, it } from "vitest";
import { ChunkAccumulator } from "../../src/relay/chunk-accumulator.ts";

const OURS = "chatcmpl-req-1";

const chunk = (fields: Record<string, unknown>, delta: Record<string, unknown>, finish: string | null = null) =>
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    ...fields,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });

const accumulator = (limit = 100) => new ChunkAccumulator(OURS, "m", limit);

describe("ChunkAccumulator.relayText", () => {
  it("relays a chunk that needs no change but its id as the upstream wrote it, only the id's value edited", () => {
    // Spacing and key order a re-serialization would change.
    const text = `{"choices": [{"delta": {"content": "Hi"}, "index": 0, "finish_reason": null}], "model": "m", "id": "x"}`;
    expect(accumulator().relayText(text)).toBe(text.replace(`"id": "x"`, `"id": "${OURS}"`));
  });

  it("edits the model name in place too, and writes our id into every chunk", () => {
    const acc = accumulator();
    const text = `{"id":"up-7","object":"chat.completion.chunk","model":"upstream-name","choices":[{"index":0,"delta":{"content":"a"}}]}`;
    const ours = `{"id":"${OURS}","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`;
    expect(acc.relayText(text)).toBe(ours);
    expect(acc.relayText(text.replace("up-7", "up-8"))).toBe(ours);
  });

  it("never takes a nested id or an id-looking value for the chunk's own", () => {
    const acc = accumulator();
    const delta = { content: '"id":"x"', tool_calls: [{ index: 0, id: "call_1", function: { name: "id" } }] };
    const relayed = JSON.parse(acc.relayText(chunk({ model: "m" }, delta))!) as Record<string, unknown>;
    expect(relayed.id).toBe(OURS);
    expect(relayed.choices).toEqual([{ index: 0, delta, finish_reason: null }]);
  });

  it("serializes when the id cannot be edited exactly: missing, not a string, escaped, or repeated", () => {
    for (const text of [
      `{"model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`,
      `{"id":7,"model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`,
      // JSON.parse keeps the last of a repeated key, however it is spelt.
      `{"id":"a","model":"m","\\u0069d":"b","choices":[{"index":0,"delta":{"content":"a"}}]}`,
      `{"id":"a","model":"m","choices":[{"index":0,"delta":{"content":"a"}}],"id":"b"}`,
      `{"\\u0069d":"a","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`,
    ]) {
      const relayed = JSON.parse(accumulator().relayText(text)!) as Record<string, unknown>;
      expect(relayed).toMatchObject({ id: OURS, model: "m", choices: [{ delta: { content: "a" } }] });
    }
  });

  it("edits a stream's repeating head once and reuses it, noticing when it changes", () => {
    const acc = accumulator();
    const text = (id: string, content: string) =>
      `{"id":"${id}","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"${content}"}}]}`;
    const ours = (content: string) =>
      `{"id":"${OURS}","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${content}"}}]}`;
    expect(acc.relayText(text("u1", "a"))).toBe(ours("a"));
    expect(acc.relayText(text("u1", "b"))).toBe(ours("b"));
    expect(acc.relayText(text("u2", "c"))).toBe(ours("c"));
    expect(acc.relayText(text("u2", "d").replace(`"id":"u2"`, `"id":"u2","extra":"\\u0069d"`))).toBe(
      ours("d").replace(`"id":"${OURS}"`, `"id":"${OURS}","extra":"\\u0069d"`),
    );
  });

  it("drops usage, and then serializes", () => {
    const acc = accumulator();
    const withUsage = acc.relayText(
      chunk({ model: "m", usage: { prompt_tokens: 1, completion_tokens: 1 } }, { content: "!" }),
    );
    expect(JSON.parse(withUsage!)).not.toHaveProperty("usage");
    expect(JSON.parse(withUsage!)).toMatchObject({ id: OURS, model: "m" });
    expect(acc.reportedUsage).toEqual({ promptTokens: 1, completionTokens: 1 });
  });

  it("serializes a chunk cut at the output limit, and one holding line breaks", () => {
    const acc = accumulator(2);
    const cut = acc.relayText(chunk({ model: "m" }, { content: "one two three four five" }));
    const content = (JSON.parse(cut!) as { choices: Array<{ delta: { content: string } }> }).choices[0]!.delta.content;
    expect(content).toBe("one two");
    const multiline = `{"model": "m",\n"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}`;
    expect(accumulator().relayText(multiline)).toBe(JSON.stringify({ ...JSON.parse(multiline), id: OURS }));
  });

  it("relays nothing for a chunk without choices", () => {
    expect(accumulator().relayText(JSON.stringify({ id: "x", model: "m", choices: [], usage: {} }))).toBeUndefined();
  });

  it("puts our id on the usage chunk and the assembled completion, and reports how the answer ended", () => {
    const acc = accumulator();
    expect(acc.finishReason).toBeNull();
    acc.accept(chunk({ model: "m" }, { content: "a" }));
    acc.accept(chunk({ model: "m" }, {}, "length"));
    const usage = { inputTokens: 1n, outputTokens: 1n, cachedInputTokens: 0n, reasoningTokens: 0n };
    // The cost settlement will post, in USD.
    const withCost = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2, cost: 0.000002 };
    expect(acc.usageChunk(usage, 2n)).toMatchObject({ id: OURS, choices: [], usage: withCost });
    expect(acc.completion(usage, 2n)).toMatchObject({ id: OURS, usage: withCost });
    expect(acc.finishReason).toBe("length");
    expect(acc.firstChoiceAt).toBeGreaterThan(0);
  });
});

describe("ChunkAccumulator.completion, what an upstream adds", () => {
  it("keeps a provider's own top-level fields and a reasoning model's reasoning text, under our id and model", () => {
    const acc = accumulator();
    acc.accept(chunk({ model: "up", provider: "acme", x_trace: { region: "eu" } }, { reasoning_content: "Think" }));
    acc.accept(chunk({ model: "up", provider: "acme" }, { reasoning_content: "ing." }));
    acc.accept(chunk({ model: "up" }, { content: "Hi" }, "stop"));
    const completion = acc.completion(
      { inputTokens: 1n, outputTokens: 1n, cachedInputTokens: 0n, reasoningTokens: 0n },
      0n,
    );
    expect(completion).toMatchObject({
      id: OURS,
      object: "chat.completion",
      model: "m",
      provider: "acme",
      x_trace: { region: "eu" },
      choices: [{ message: { role: "assistant", content: "Hi", reasoning_content: "Thinking." } }],
    });
  });

  it("never lets an upstream's field stand in for ours", () => {
    const acc = accumulator();
    acc.accept(chunk({ model: "up", usage: { prompt_tokens: 1, completion_tokens: 1 } }, { content: "Hi" }, "stop"));
    const completion = acc.completion(
      { inputTokens: 3n, outputTokens: 2n, cachedInputTokens: 0n, reasoningTokens: 0n },
      0n,
    );
    expect(completion).toMatchObject({ id: OURS, model: "m", object: "chat.completion" });
    expect((completion.usage as Record<string, unknown>).prompt_tokens).toBe(3);
  });
});
