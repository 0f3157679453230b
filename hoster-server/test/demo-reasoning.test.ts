import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { REASONING_TOKENS } from "../src/demo/demo-reasoning.ts";
import type { HosterServerHandle } from "../src/server.ts";
import { post, sseData, startServer } from "./harness.ts";

const TOKEN = "test-token";
// One message: nothing of it is ever cached, so every answer's usage is the same.
const messages = [{ role: "user", content: "Why is the sky blue?" }];
const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } }];

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  completion_tokens_details: { reasoning_tokens: number };
}
interface Message {
  content: string | null;
  reasoning_content?: string;
  tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
}
interface Completion {
  choices: Array<{ message: Message; finish_reason: string }>;
  usage: Usage;
}
interface Chunk {
  choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }>;
  usage?: Usage;
}

let server: HosterServerHandle;
beforeAll(async () => {
  server = await startServer();
});
afterAll(async () => {
  await server?.close();
});

async function complete(body: object, url = server.url): Promise<Completion> {
  const res = await post(url, TOKEN, { model: "demo-small", messages, ...body });
  expect(res.status).toBe(200);
  return (await res.json()) as Completion;
}

/** The stream's chunks, and its deltas' fields in the order they came. */
async function stream(body: object, url = server.url) {
  const res = await post(url, TOKEN, {
    model: "demo-small",
    messages,
    stream: true,
    stream_options: { include_usage: true },
    ...body,
  });
  expect(res.status).toBe(200);
  const chunks = sseData(await res.text())
    .filter((d) => d !== "[DONE]")
    .map((d) => JSON.parse(d) as Chunk);
  const deltas = chunks.flatMap((c) => c.choices.map((choice) => choice.delta));
  const text = (field: string) => deltas.map((d) => (typeof d[field] === "string" ? d[field] : "")).join("");
  const fields = deltas.flatMap((d) => Object.keys(d).filter((k) => k !== "role" && d[k] !== "" && d[k] !== null));
  return {
    reasoning: text("reasoning_content"),
    content: text("content"),
    fields,
    finishReason: chunks.flatMap((c) => c.choices).at(-1)!.finish_reason,
    usage: chunks.at(-1)!.usage!,
  };
}

describe("reasoning", () => {
  it("reasons in a short sentence before the same answer, its tokens counted as output", async () => {
    const plain = await complete({});
    expect(plain.choices[0]!.message.reasoning_content).toBeUndefined();
    expect(plain.usage.completion_tokens_details).toEqual({ reasoning_tokens: 0 });

    const asked = await complete({ reasoning_effort: "high" });
    const { content, reasoning_content: reasoning } = asked.choices[0]!.message;
    expect(content).toBe(plain.choices[0]!.message.content);
    expect(asked.choices[0]!.finish_reason).toBe("stop");
    expect(countTextTokens(reasoning!)).toBe(REASONING_TOKENS);
    expect(asked.usage).toMatchObject({
      completion_tokens: REASONING_TOKENS + countTextTokens(content!),
      total_tokens: asked.usage.prompt_tokens + REASONING_TOKENS + countTextTokens(content!),
      completion_tokens_details: { reasoning_tokens: REASONING_TOKENS },
    });
  });

  it("streams reasoning_content before the content, the same texts and usage as unstreamed", async () => {
    const whole = await complete({ reasoning_effort: "low" });
    const streamed = await stream({ reasoning_effort: "low" });
    expect(streamed.reasoning).toBe(whole.choices[0]!.message.reasoning_content);
    expect(streamed.content).toBe(whole.choices[0]!.message.content);
    const firstContent = streamed.fields.indexOf("content");
    expect(streamed.fields.lastIndexOf("reasoning_content")).toBeLessThan(firstContent);
    expect(streamed.finishReason).toBe("stop");
    expect(streamed.usage).toEqual(whole.usage);
  });

  it("is asked by any effort but none, as reasoning_effort or as a reasoning object", async () => {
    const plain = await complete({});
    for (const asked of [
      { reasoning_effort: "minimal" },
      { reasoning_effort: "xhigh" },
      { reasoning: { effort: "medium" } },
      { reasoning: { effort: "high", summary: "auto" } },
      { reasoning: {} },
    ]) {
      expect((await complete(asked)).usage.completion_tokens_details.reasoning_tokens).toBe(REASONING_TOKENS);
    }
    for (const off of [
      { reasoning_effort: "none" },
      { reasoning: { effort: "none" } },
      { reasoning: { enabled: false } },
    ]) {
      expect(await complete(off)).toMatchObject({ choices: plain.choices, usage: plain.usage });
    }
  });

  it("refuses a reasoning_effort that is not a string, and a reasoning that is not an object", async () => {
    for (const [body, param] of [
      [{ reasoning_effort: 3 }, "reasoning_effort"],
      [{ reasoning: "high" }, "reasoning"],
    ] as const) {
      const res = await post(server.url, TOKEN, { model: "demo-small", messages, ...body });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { param: string } }).error.param).toBe(param);
    }
  });

  it("calls a tool once it has reasoned: the call opens after the reasoning", async () => {
    const body = { reasoning_effort: "high", tools, messages: [{ role: "user", content: "call lookup {}" }] };
    const whole = await complete(body);
    const { message } = whole.choices[0]!;
    expect(whole.choices[0]!.finish_reason).toBe("tool_calls");
    expect(message.tool_calls![0]!.function).toEqual({ name: "lookup", arguments: "{}" });
    expect(whole.usage.completion_tokens).toBe(REASONING_TOKENS + countTextTokens("lookup{}"));

    const streamed = await stream(body);
    expect(streamed.reasoning).toBe(message.reasoning_content);
    expect(streamed.fields.indexOf("tool_calls")).toBe(streamed.fields.lastIndexOf("reasoning_content") + 1);
    expect(streamed.finishReason).toBe("tool_calls");
    expect(streamed.usage).toEqual(whole.usage);
  });
});

describe("max_tokens bounds reasoning and answer together", () => {
  it("cuts the answer after the reasoning at the cap", async () => {
    const full = await complete({ reasoning_effort: "high" });
    const cut = await complete({ reasoning_effort: "high", max_tokens: REASONING_TOKENS + 3 });
    const { message } = cut.choices[0]!;
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(message.reasoning_content).toBe(full.choices[0]!.message.reasoning_content);
    expect(countTextTokens(message.content!)).toBe(3);
    expect(full.choices[0]!.message.content!.startsWith(message.content!)).toBe(true);
    expect(cut.usage.completion_tokens).toBe(REASONING_TOKENS + 3);

    const streamed = await stream({ reasoning_effort: "high", max_completion_tokens: REASONING_TOKENS + 3 });
    expect(streamed).toMatchObject({ content: message.content, finishReason: "length", usage: cut.usage });
  });

  it("answers nothing, not even the call asked for, when the reasoning fills the cap", async () => {
    const asking = { reasoning_effort: "high", tools, messages: [{ role: "user", content: "call lookup {}" }] };
    const full = await complete(asking);
    for (const cap of [5, REASONING_TOKENS]) {
      const cut = await complete({ ...asking, max_tokens: cap });
      const { message } = cut.choices[0]!;
      expect(cut.choices[0]!.finish_reason).toBe("length");
      expect(message.content).toBe("");
      expect(message.tool_calls).toBeUndefined();
      expect(full.choices[0]!.message.reasoning_content!.startsWith(message.reasoning_content!)).toBe(true);
      expect(cut.usage.completion_tokens).toBe(cap);
      expect(cut.usage.completion_tokens_details).toEqual({ reasoning_tokens: cap });
    }
    const streamed = await stream({ reasoning_effort: "high", max_tokens: 5 });
    expect(streamed).toMatchObject({ content: "", finishReason: "length" });
    expect(countTextTokens(streamed.reasoning)).toBe(5);
  });
});

it("paces the reasoning tokens like the answer's", async () => {
  const paced = await startServer({ DEMO_TOKENS_PER_SECOND: "100", DEMO_COMPLETION_TOKENS: "1" });
  try {
    // 20 reasoning tokens and 1 of answer at 100 tokens/s is 210 ms; assert a lower bound only.
    let started = performance.now();
    const streamed = await stream({ reasoning_effort: "high" }, paced.url);
    expect(streamed.usage.completion_tokens).toBe(REASONING_TOKENS + 1);
    expect(performance.now() - started).toBeGreaterThanOrEqual(160);

    started = performance.now();
    await complete({ reasoning_effort: "high" }, paced.url);
    expect(performance.now() - started).toBeGreaterThanOrEqual(160);
  } finally {
    await paced.close();
  }
});
