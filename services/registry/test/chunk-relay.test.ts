import { describe, expect, it } from "vitest";
import { ChunkAccumulator } from "../src/chat/chunk-accumulator.ts";

const chunk = (fields: Record<string, unknown>, delta: Record<string, unknown>, finish: string | null = null) =>
  JSON.stringify({
    id: "chatcmpl-1",
    object: "chat.completion.chunk",
    created: 1,
    ...fields,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });

describe("ChunkAccumulator.relayText", () => {
  it("relays a chunk that needs no change as the upstream wrote it, byte for byte", () => {
    const acc = new ChunkAccumulator("m", 100);
    // Spacing and key order a re-serialization would change.
    const text = `{"choices": [{"delta": {"content": "Hi"}, "index": 0, "finish_reason": null}], "model": "m", "id": "x"}`;
    expect(acc.relayText(text)).toBe(text);
  });

  it("rewrites the model name and drops usage, and then serializes", () => {
    const acc = new ChunkAccumulator("m", 100);
    const renamed = acc.relayText(chunk({ model: "upstream-name" }, { content: "Hi" }));
    expect(JSON.parse(renamed!)).toMatchObject({ model: "m", choices: [{ delta: { content: "Hi" } }] });
    const withUsage = acc.relayText(
      chunk({ model: "m", usage: { prompt_tokens: 1, completion_tokens: 1 } }, { content: "!" }),
    );
    expect(JSON.parse(withUsage!)).not.toHaveProperty("usage");
    expect(acc.reportedUsage).toEqual({ promptTokens: 1, completionTokens: 1 });
  });

  it("serializes a chunk cut at the output limit, and one holding line breaks", () => {
    const acc = new ChunkAccumulator("m", 2);
    const cut = acc.relayText(chunk({ model: "m" }, { content: "one two three four five" }));
    const content = (JSON.parse(cut!) as { choices: Array<{ delta: { content: string } }> }).choices[0]!.delta.content;
    expect(content).toBe("one two");
    const acc2 = new ChunkAccumulator("m", 100);
    const multiline = `{"model": "m",\n"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}`;
    expect(acc2.relayText(multiline)).toBe(JSON.stringify(JSON.parse(multiline)));
  });

  it("relays nothing for a chunk without choices", () => {
    const acc = new ChunkAccumulator("m", 100);
    expect(acc.relayText(JSON.stringify({ id: "x", model: "m", choices: [], usage: {} }))).toBeUndefined();
  });
});
