import { describe, expect, it } from "vitest";
import { SseParser, SseTooLargeError } from "../../src/relay/sse-parser.ts";
import { billedUsage } from "../../src/relay/billed-usage.ts";
import { upstreamBody } from "../../src/relay/request-body.ts";
import { OutputBudget, runawayLimit } from "../../src/relay/output-budget.ts";
import { ChunkAccumulator } from "../../src/relay/chunk-accumulator.ts";
import { AppError } from "@mkt/runtime/errors";
import { countTextTokens } from "@mkt/runtime/tokens";

describe("SseParser", () => {
  it("yields data payloads across arbitrary chunk boundaries and line endings", () => {
    const text = 'data: {"a":1}\r\n\r\n: keep-alive\n\nevent: x\ndata: {"b":\ndata: 2}\n\ndata: [DONE]\n\n';
    for (const size of [1, 2, 3, 7, text.length]) {
      const parser = new SseParser();
      const out: string[] = [];
      for (let i = 0; i < text.length; i += size) out.push(...parser.push(text.slice(i, i + size)));
      out.push(...parser.end());
      expect(out).toEqual(['{"a":1}', '{"b":\n2}', "[DONE]"]);
    }
  });

  it("delivers a last event that lacks its blank line", () => {
    const parser = new SseParser();
    expect(parser.push("data: tail")).toEqual([]);
    expect(parser.end()).toEqual(["tail"]);
  });

  it("refuses an event larger than its limit", () => {
    const parser = new SseParser(16);
    expect(() => parser.push(`data: ${"x".repeat(32)}`)).toThrow(SseTooLargeError);
  });
});

describe("billedUsage", () => {
  const base = { promptTokens: 20n, deliveredOutputTokens: 6n, maxOutputTokens: 100n };

  it("takes an honest report", () => {
    expect(billedUsage({ ...base, reported: { promptTokens: 12, completionTokens: 5 } })).toEqual({
      inputTokens: 12n,
      outputTokens: 5n,
      cachedInputTokens: 0n,
      reasoningTokens: 0n,
    });
  });

  it("clamps a report to the edge's prompt count, the delivered count and the cap", () => {
    expect(billedUsage({ ...base, reported: { promptTokens: 1e12, completionTokens: 1e12 } })).toEqual({
      inputTokens: 20n,
      outputTokens: 6n,
      cachedInputTokens: 0n,
      reasoningTokens: 0n,
    });
    expect(billedUsage({ ...base, maxOutputTokens: 4n, reported: { promptTokens: 5, completionTokens: 50 } })).toEqual({
      inputTokens: 5n,
      outputTokens: 4n,
      cachedInputTokens: 0n,
      reasoningTokens: 0n,
    });
  });

  it.each([
    ["negative", -1, -1],
    ["NaN", NaN, NaN],
    ["infinite", Infinity, -Infinity],
    ["strings", "12", "5"],
    ["null", null, null],
  ])("falls back to its own counts when the report is %s", (_case, p, c) => {
    expect(billedUsage({ ...base, reported: { promptTokens: p, completionTokens: c } })).toEqual({
      inputTokens: 20n,
      outputTokens: 6n,
      cachedInputTokens: 0n,
      reasoningTokens: 0n,
    });
  });

  it("takes cached and reasoning counts as parts of the billed input and output, clamped to them", () => {
    const reported = { promptTokens: 12, completionTokens: 5, cachedTokens: 8, reasoningTokens: 3 };
    expect(billedUsage({ ...base, reported })).toEqual({
      inputTokens: 12n,
      outputTokens: 5n,
      cachedInputTokens: 8n,
      reasoningTokens: 3n,
    });
    // Claims above the billed counts are clamped to them (the edge's prompt count lowers the input first).
    const liar = { promptTokens: 1e12, completionTokens: 5, cachedTokens: 1e12, reasoningTokens: 99 };
    expect(billedUsage({ ...base, reported: liar })).toEqual({
      inputTokens: 20n,
      outputTokens: 5n,
      cachedInputTokens: 20n,
      reasoningTokens: 5n,
    });
    for (const garbage of [-1, NaN, "8", null, Infinity]) {
      const counts = billedUsage({
        ...base,
        reported: { ...reported, cachedTokens: garbage, reasoningTokens: garbage },
      });
      expect(counts).toMatchObject({ cachedInputTokens: 0n, reasoningTokens: 0n });
    }
  });

  it("uses its own counts when nothing was reported", () => {
    expect(billedUsage({ ...base, reported: undefined })).toEqual({
      inputTokens: 20n,
      outputTokens: 6n,
      cachedInputTokens: 0n,
      reasoningTokens: 0n,
    });
  });
});

describe("upstreamBody", () => {
  const body = (o: object) => Buffer.from(JSON.stringify(o));

  it("rewrites model and output cap, forces streaming with usage, drops `models`, keeps every other field", () => {
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object" } } }];
    const out = JSON.parse(
      upstreamBody(
        body({
          model: "Demo Small",
          models: ["Demo Small", "demo-large"],
          messages: [{ role: "user", content: "hi" }],
          max_completion_tokens: 9999,
          stream: false,
          stream_options: { include_usage: false, other: 1 },
          temperature: 0.2,
          n: 2,
          stop: ["\n"],
          tools,
          response_format: { type: "json_object" },
        }),
        "llama3:8b",
        512n,
      ).toString(),
    );
    expect(out).toEqual({
      model: "llama3:8b",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 512,
      stream: true,
      stream_options: { include_usage: true, other: 1 },
      temperature: 0.2,
      n: 2,
      stop: ["\n"],
      tools,
      response_format: { type: "json_object" },
    });
  });

  it("refuses a body that is not a JSON object", () => {
    expect(() => upstreamBody(Buffer.from("[1]"), "m", 5n)).toThrow(AppError);
    expect(() => upstreamBody(Buffer.from("{"), "m", 5n)).toThrow(AppError);
  });
});

describe("OutputBudget", () => {
  it("lets pieces through whole while they fit, then cuts the one that does not to the tokens left", () => {
    const budget = new OutputBudget(5);
    expect(budget.take(" one two")).toBe(" one two");
    expect(budget.take(" three")).toBe(" three");
    expect(budget.exhausted).toBe(false);
    expect(budget.take(" four five six seven")).toBe(" four five");
    expect(budget.exhausted).toBe(true);
    expect(budget.take(" eight")).toBe("");
    expect(budget.text).toBe(" one two three four five");
  });

  it("decides on the whole text's count, not the sum of the pieces' counts", () => {
    // One character per piece: the pieces count ~4x the tokens the text holds.
    const text = " hello world, this is a long enough sentence to count";
    const limit = 6;
    const budget = new OutputBudget(limit);
    for (const ch of text) budget.take(ch);
    expect(countTextTokens(budget.text)).toBe(limit);
    expect(text.startsWith(budget.text)).toBe(true);
  });

  it("lets pieces through on their byte length far from the limit, then cuts at the exact token count", () => {
    // Each piece has more bytes than tokens, so bytes reach the limit well before the tokens do.
    for (const piece of [" word", "😀", "日本"]) {
      const limit = 50;
      const budget = new OutputBudget(limit);
      const kept = Array.from({ length: 400 }, () => budget.take(piece)).join("");
      expect(kept).toBe(budget.text);
      expect(budget.exhausted).toBe(true);
      expect(countTextTokens(budget.text)).toBeLessThanOrEqual(limit);
      expect(countTextTokens(budget.text + piece)).toBeGreaterThan(limit);
    }
  });

  it("never cuts inside a character", () => {
    const budget = new OutputBudget(1);
    const kept = budget.take("日本語");
    expect("日本語".startsWith(kept)).toBe(true);
    expect(kept).not.toContain("\uFFFD");
  });

  it("counts text that spells a special token as plain text", () => {
    expect(countTextTokens("<|endoftext|>")).toBeGreaterThan(1);
    expect(new OutputBudget(100).take("<|endoftext|>")).toBe("<|endoftext|>");
  });
});

describe("runawayLimit", () => {
  it("lets a choice run to ratio × cap + slack by our count (the defaults: 1.5 and 32)", () => {
    const guard = { ratio: 1.5, slackTokens: 32 };
    expect(runawayLimit(20n, guard)).toBe(62);
    expect(runawayLimit(7n, guard)).toBe(42); // 10.5 rounds down
    expect(runawayLimit(4096n, guard)).toBe(6176);
    // Ratio 1 and no slack: a cut at exactly the cap (right only when both sides count alike).
    expect(runawayLimit(20n, { ratio: 1, slackTokens: 0 })).toBe(20);
  });
});

describe("ChunkAccumulator", () => {
  const chunk = (delta: object, finish: string | null = null, index = 0) =>
    JSON.stringify({ id: "c", choices: [{ index, delta, finish_reason: finish }] });
  type Out = { choices: Array<{ index: number; delta: { content?: string }; finish_reason: string | null }> };

  it("cuts content, tool arguments and reasoning against the choice's budget; the cut chunk ends it with length", () => {
    const acc = new ChunkAccumulator("chatcmpl-ours", "m", 4);
    acc.accept(chunk({ role: "assistant", reasoning_content: " a b" }));
    expect(acc.cutByGuard).toBe(false);
    const cut = acc.accept(
      chunk({ tool_calls: [{ index: 0, id: "t", function: { name: "", arguments: " c d e f" } }] }),
    ) as {
      choices: Array<{ finish_reason: string; delta: { tool_calls: Array<{ function: { arguments: string } }> } }>;
    };
    expect(cut.choices[0]!.delta.tool_calls[0]!.function.arguments).toBe(" c d");
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(acc.cutByGuard).toBe(true);
    expect(acc.stoppedByGuard).toBe(true);
    expect(acc.finished).toBe(true);
    expect(acc.deliveredTokens()).toBe(4n);
    // The rest of a runaway is not relayed.
    expect(acc.accept(chunk({ content: " g h" }))).toBeUndefined();
    expect(acc.deliveredTokens()).toBe(4n);
  });

  it("marks a choice whose finishing chunk was cut as ending at length", () => {
    const acc = new ChunkAccumulator("chatcmpl-ours", "m", 2);
    const out = acc.accept(chunk({ content: " one two three" }, "stop")) as Out;
    expect(out.choices[0]!.finish_reason).toBe("length");
    expect(out.choices[0]!.delta.content).toBe(" one two");
  });

  it("leaves a choice alone up to its limit, whatever the cap the upstream was sent", () => {
    const acc = new ChunkAccumulator("chatcmpl-ours", "m", 4);
    const out = acc.accept(chunk({ content: " one two three four" }, "stop")) as Out;
    expect(out.choices[0]).toMatchObject({ delta: { content: " one two three four" }, finish_reason: "stop" });
    expect(acc.cutByGuard).toBe(false);
  });

  it("guards each choice on its own and stops reading only once every choice has ended", () => {
    const acc = new ChunkAccumulator("chatcmpl-ours", "m", 3);
    acc.accept(chunk({ content: " a" }, null, 0));
    acc.accept(chunk({ content: " x" }, null, 1));
    // Choice 0 runs away: cut at its limit and ended; choice 1 goes on.
    const both = JSON.stringify({
      id: "c",
      choices: [
        { index: 0, delta: { content: " b c d e" }, finish_reason: null },
        { index: 1, delta: { content: " y" }, finish_reason: null },
      ],
    });
    const out = acc.accept(both) as Out;
    expect(out.choices).toMatchObject([
      { index: 0, delta: { content: " b c" }, finish_reason: "length" },
      { index: 1, delta: { content: " y" }, finish_reason: null },
    ]);
    expect(acc.cutByGuard).toBe(true);
    expect(acc.stoppedByGuard).toBe(false);
    // A chunk holding both keeps only the choice still open.
    const later = JSON.stringify({
      id: "c",
      choices: [
        { index: 0, delta: { content: " f" }, finish_reason: null },
        { index: 1, delta: { content: " z" }, finish_reason: "stop" },
      ],
    });
    expect((acc.accept(later) as Out).choices).toMatchObject([{ index: 1, finish_reason: "stop" }]);
    expect(acc.stoppedByGuard).toBe(true);
    expect(acc.deliveredTokens()).toBe(6n); // three tokens each
    expect(
      acc.completion({ inputTokens: 1n, outputTokens: 6n, cachedInputTokens: 0n, reasoningTokens: 0n }, 0n),
    ).toMatchObject({
      choices: [
        { index: 0, message: { content: " a b c" }, finish_reason: "length" },
        { index: 1, message: { content: " x y z" }, finish_reason: "stop" },
      ],
    });
  });

  it("refuses a broken event mid-answer, and ignores one after every choice finished", () => {
    const acc = new ChunkAccumulator("chatcmpl-ours", "m", 100);
    acc.accept(chunk({ content: "hi" }));
    expect(() => acc.accept("{broken")).toThrow(/not a JSON object/);
    acc.accept(chunk({}, "stop"));
    expect(acc.accept('{"usage":{"prompt_tokens":NaN}}')).toBeUndefined();
    expect(acc.reportedUsage).toBeUndefined();
  });
});
