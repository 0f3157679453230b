import { describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { RelayedOutput, RETAIN_BYTES } from "../src/chat/relayed-output.ts";

const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
  Buffer.from(
    JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", model: "demo-small", choices, ...extra }),
  );

describe("RelayedOutput: the output tokens an answer cut by registry's failure relayed", () => {
  it("counts each choice's text as registry counts it: content, refusal, reasoning, tool and function calls", () => {
    const relayed = new RelayedOutput();
    relayed.add([
      chunk([{ index: 0, delta: { role: "assistant", content: "The weather " } }]),
      chunk([{ index: 1, delta: { content: "Il fait" } }]),
    ]);
    relayed.add([
      chunk([{ index: 0, delta: { content: "in Paris is" } }]),
      chunk([{ index: 1, delta: { reasoning_content: " beau" } }]),
      chunk([
        {
          index: 0,
          delta: {
            tool_calls: [
              { index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":' } },
            ],
          },
        },
      ]),
      chunk([{ index: 1, delta: { refusal: " no", function_call: { name: "f", arguments: "{}" } } }]),
      chunk([], { usage: { prompt_tokens: 5, completion_tokens: 99 } }),
    ]);
    const expected =
      countTextTokens('The weather in Paris isget_weather{"city":') + countTextTokens("Il fait beau nof{}");
    expect(relayed.outputTokens(1_000n, countTextTokens)).toBe(BigInt(expected));
    expect(relayed.model()).toBe("demo-small");
  });

  it("never counts past the cap (max_tokens × n), and stops counting there", () => {
    const relayed = new RelayedOutput();
    relayed.add([chunk([{ index: 0, delta: { content: "word ".repeat(500) } }])]);
    expect(relayed.outputTokens(100n, countTextTokens)).toBe(100n);
    const limits: number[] = [];
    relayed.outputTokens(100n, (text, limit) => {
      limits.push(limit);
      return countTextTokens(text, limit);
    });
    expect(limits).toEqual([100]);
  });

  it("keeps at most RETAIN_BYTES of chunks: a longer answer is billed what the first ones hold, never more", () => {
    const relayed = new RelayedOutput();
    const piece = chunk([{ index: 0, delta: { content: "a".repeat(60_000) } }]);
    const fit = Math.floor(RETAIN_BYTES / piece.length);
    for (let i = 0; i < fit + 5; i++) relayed.add([piece]);
    const counted = relayed.outputTokens(10_000_000n, countTextTokens);
    expect(counted).toBe(BigInt(countTextTokens("a".repeat(60_000 * fit))));
  });

  it("is empty until a chunk is relayed; a chunk that is not a JSON object counts for nothing", () => {
    const relayed = new RelayedOutput();
    expect(relayed.empty).toBe(true);
    relayed.add([Buffer.from("not json"), Buffer.from("[1,2]")]);
    expect(relayed.empty).toBe(false);
    expect(relayed.outputTokens(10n, countTextTokens)).toBe(0n);
    expect(relayed.model()).toBeUndefined();
  });

  it("keeps a copy: a chunk's own buffer (a view into a gRPC message) is not kept alive or read again", () => {
    const relayed = new RelayedOutput();
    const pieces = Array.from({ length: 300 }, (_, i) => chunk([{ index: 0, delta: { content: `word${i} ` } }]));
    relayed.add(pieces);
    const counted = relayed.outputTokens(100_000n, countTextTokens);
    for (const piece of pieces) piece.fill(0x20);
    expect(relayed.outputTokens(100_000n, countTextTokens)).toBe(counted);
    expect(counted).toBe(BigInt(countTextTokens(Array.from({ length: 300 }, (_, i) => `word${i} `).join(""))));
  });
});
