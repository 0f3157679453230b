import { describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { BilledUsage } from "../../src/relay/billed-usage.ts";
import { ChunkAccumulator } from "../../src/relay/chunk-accumulator.ts";

// Whatever the caller receives is output it pays for: not only `content` and `tool_calls`, but
// the legacy `function_call` and the transcript of an audio answer.

const chunk = (choice: Record<string, unknown>) =>
  JSON.stringify({ id: "x", object: "chat.completion.chunk", model: "m", choices: [{ index: 0, ...choice }] });

const fed = (...chunks: string[]) => {
  const acc = new ChunkAccumulator("chatcmpl-ours", "m", 1000);
  for (const c of chunks) acc.accept(c);
  return acc;
};

const usage: BilledUsage = { inputTokens: 1n, outputTokens: 1n, cachedInputTokens: 0n, reasoningTokens: 0n };

describe("output the caller receives is counted as delivered", () => {
  it("legacy function_call deltas count like tool_calls, and assemble into message.function_call", () => {
    const acc = fed(
      chunk({ delta: { role: "assistant", content: null, function_call: { name: "get_weather", arguments: "" } } }),
      chunk({ delta: { function_call: { arguments: '{"city":' } } }),
      chunk({ delta: { function_call: { arguments: '"Paris"}' } }, finish_reason: "function_call" }),
    );
    expect(acc.deliveredTokens()).toBe(BigInt(countTextTokens('get_weather{"city":"Paris"}')));
    expect(acc.deliveredTokens()).toBeGreaterThan(0n);
    const message = (acc.completion(usage, 0n).choices as Array<{ message: Record<string, unknown> }>)[0]!.message;
    expect(message).toMatchObject({
      content: null,
      function_call: { name: "get_weather", arguments: '{"city":"Paris"}' },
    });
  });

  it("a tool-call-only answer counts its name and arguments", () => {
    const acc = fed(
      chunk({ delta: { tool_calls: [{ index: 0, id: "c1", function: { name: "lookup", arguments: '{"q":1}' } }] } }),
      chunk({ delta: {}, finish_reason: "tool_calls" }),
    );
    expect(acc.deliveredTokens()).toBe(BigInt(countTextTokens('lookup{"q":1}')));
  });

  it("an audio transcript in delta.audio counts as text output", () => {
    const acc = fed(
      chunk({ delta: { audio: { id: "a1", transcript: "Hello there", data: "AAAA" } } }),
      chunk({ delta: { audio: { transcript: ", friend" } }, finish_reason: "stop" }),
    );
    expect(acc.deliveredTokens()).toBe(BigInt(countTextTokens("Hello there, friend")));
    const message = (acc.completion(usage, 0n).choices as Array<{ message: Record<string, unknown> }>)[0]!.message;
    expect(message.audio).toEqual({ transcript: "Hello there, friend" });
  });

  it("a whole message written into a chunk (message.audio.transcript) counts too", () => {
    const acc = fed(
      chunk({
        message: { role: "assistant", content: null, audio: { transcript: "Spoken words" } },
        finish_reason: "stop",
      }),
    );
    expect(acc.deliveredTokens()).toBe(BigInt(countTextTokens("Spoken words")));
  });

  it("the runaway guard bounds a function_call like any other output", () => {
    const acc = new ChunkAccumulator("chatcmpl-ours", "m", 3);
    const relayed = acc.accept(chunk({ delta: { function_call: { name: "f", arguments: " word".repeat(50) } } }));
    expect(acc.deliveredTokens()).toBeLessThanOrEqual(3n);
    expect(acc.cutByGuard).toBe(true);
    expect(relayed).toBeDefined();
  });
});
