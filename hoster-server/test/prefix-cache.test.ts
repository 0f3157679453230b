import { randomUUID } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countPromptTokens } from "@mkt/runtime/tokens";
import { PREFIX_CACHE_ENTRIES, PrefixCache } from "../src/demo/prefix-cache.ts";
import type { HosterServerHandle } from "../src/server.ts";
import { startServer } from "./harness.ts";

type Message = OpenAI.Chat.ChatCompletionMessageParam;

const user = (content: string): Message => ({ role: "user", content });

describe("PrefixCache", () => {
  it("finds the longest leading run seen before, never the whole request", () => {
    const cache = new PrefixCache();
    const [a, b, c, d] = [user("a"), user("b"), user("c"), user("d")];
    expect(cache.lookUpAndRecord("m", [a, b], undefined)).toBe(0);
    expect(cache.lookUpAndRecord("m", [a, b], undefined)).toBe(1);
    expect(cache.lookUpAndRecord("m", [a, b, c, d], undefined)).toBe(2);
    expect(cache.lookUpAndRecord("m", [a, b, d], undefined)).toBe(2);
    expect(cache.lookUpAndRecord("m", [a, c], undefined)).toBe(1);
    expect(cache.lookUpAndRecord("m", [b, a], undefined)).toBe(0);
  });

  it("keeps models apart, and a run seen with other tools is another prefix", () => {
    const cache = new PrefixCache();
    const tools = [{ type: "function", function: { name: "t" } }];
    cache.lookUpAndRecord("m", [user("a"), user("b")], tools);
    expect(cache.lookUpAndRecord("other", [user("a"), user("b"), user("c")], tools)).toBe(0);
    expect(cache.lookUpAndRecord("m", [user("a"), user("b"), user("c")], undefined)).toBe(0);
    expect(cache.lookUpAndRecord("m", [user("a"), user("b"), user("c")], tools)).toBe(2);
  });

  it("tells messages apart by name, tool calls and the result's call id", () => {
    const cache = new PrefixCache();
    const call = { id: "call_1", type: "function", function: { name: "t", arguments: "{}" } };
    cache.lookUpAndRecord("m", [{ role: "assistant", content: null, tool_calls: [call] }, user("x")], undefined);
    const otherArgs = { ...call, function: { name: "t", arguments: '{"a":1}' } };
    expect(
      cache.lookUpAndRecord("m", [{ role: "assistant", content: null, tool_calls: [otherArgs] }, user("x")], undefined),
    ).toBe(0);
    cache.lookUpAndRecord("m", [{ role: "tool", content: "r", tool_call_id: "call_1" }, user("x")], undefined);
    expect(
      cache.lookUpAndRecord("m", [{ role: "tool", content: "r", tool_call_id: "call_2" }, user("x")], undefined),
    ).toBe(0);
    cache.lookUpAndRecord("m", [{ role: "user", content: "hi", name: "ann" }, user("x")], undefined);
    expect(cache.lookUpAndRecord("m", [{ role: "user", content: "hi", name: "bob" }, user("x")], undefined)).toBe(0);
  });

  it("evicts the least recently used runs past its bound, a conversation's tail before its head", () => {
    const cache = new PrefixCache(4);
    const [a, b, c] = [user("a"), user("b"), user("c")];
    cache.lookUpAndRecord("m", [a, b, c], undefined); // keeps a, a+b, a+b+c
    cache.lookUpAndRecord("m", [user("x"), user("y")], undefined); // 5 runs: a+b+c goes first
    expect(cache.lookUpAndRecord("m", [a, b, c, user("d")], undefined)).toBe(2);
    // That lookup touched a, a+b, a+b+c and a+b+c+d: x and x+y are gone.
    expect(cache.lookUpAndRecord("m", [user("x"), user("y"), user("z")], undefined)).toBe(0);
  });
});

describe("cached_tokens of the demo model", () => {
  let server: HosterServerHandle;
  let client: OpenAI;
  beforeAll(async () => {
    server = await startServer({ DEMO_MODELS: "demo-small,demo-agent" });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "test-token", maxRetries: 0 });
  });
  afterAll(async () => {
    await server?.close();
  });

  /** A first turn no earlier request (or earlier try of the test) has sent. */
  const firstTurn = (): Message[] => [
    { role: "system", content: `You are a careful assistant for conversation ${randomUUID()}.` },
    user("Plan a three-day trip to Lisbon."),
  ];

  async function streamedUsage(body: OpenAI.Chat.ChatCompletionCreateParamsStreaming) {
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of await client.chat.completions.create(body)) usage = chunk.usage ?? usage;
    return usage!;
  }

  it("reports the earlier turns as cached on the next turn, streamed and not", async () => {
    const turn1 = firstTurn();
    const first = await client.chat.completions.create({ model: "demo-small", messages: turn1 });
    expect(first.usage!.prompt_tokens_details).toEqual({ cached_tokens: 0 });

    const turn2 = [...turn1, first.choices[0]!.message, user("Add a day in Sintra.")];
    const second = await client.chat.completions.create({ model: "demo-small", messages: turn2 });
    expect(second.usage!.prompt_tokens_details).toEqual({ cached_tokens: countPromptTokens(turn1) });
    expect(second.usage!.prompt_tokens).toBe(countPromptTokens(turn2));

    const turn3 = [...turn2, second.choices[0]!.message, user("And where to eat?")];
    const third = await streamedUsage({
      model: "demo-small",
      messages: turn3,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(third.prompt_tokens_details).toEqual({ cached_tokens: countPromptTokens(turn2) });
    expect(third.prompt_tokens).toBe(countPromptTokens(turn3));
  });

  it("counts a tool loop's run with its tools, below the prompt", async () => {
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      { type: "function", function: { name: "search", parameters: { type: "object", properties: {} } } },
    ];
    const turn1 = [...firstTurn(), user("call search")];
    const call = await client.chat.completions.create({ model: "demo-small", messages: turn1, tools });
    const assistant = call.choices[0]!.message;
    const turn2: Message[] = [
      ...turn1,
      assistant,
      { role: "tool", tool_call_id: assistant.tool_calls![0]!.id, content: '{"hits": 3}' },
    ];
    const answer = await client.chat.completions.create({ model: "demo-small", messages: turn2, tools });
    const cached = answer.usage!.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBe(countPromptTokens(turn1, { tools }));
    expect(cached).toBeLessThan(answer.usage!.prompt_tokens);
  });

  it("reports 0 for a conversation not seen before, and on another model", async () => {
    const turn1 = firstTurn();
    const first = await client.chat.completions.create({ model: "demo-small", messages: turn1 });
    const turn2 = [...turn1, first.choices[0]!.message, user("Add a day in Sintra.")];
    const elsewhere = await client.chat.completions.create({ model: "demo-agent", messages: turn2 });
    expect(elsewhere.usage!.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    const other = await streamedUsage({
      model: "demo-small",
      messages: [...firstTurn(), first.choices[0]!.message, user("Add a day in Sintra.")],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(other.prompt_tokens_details).toEqual({ cached_tokens: 0 });
  });

  it("forgets a conversation once as many newer runs as its bound have been seen", async () => {
    const turn1 = firstTurn();
    const first = await client.chat.completions.create({ model: "demo-agent", messages: turn1 });
    const turn2 = [...turn1, first.choices[0]!.message, user("Add a day in Sintra.")];
    // One request of that many messages leaves that many newer runs.
    const flood = Array.from({ length: PREFIX_CACHE_ENTRIES }, (_, i) => user(`message ${i}`));
    await client.chat.completions.create({ model: "demo-agent", messages: flood });
    const second = await client.chat.completions.create({ model: "demo-agent", messages: turn2 });
    expect(second.usage!.prompt_tokens_details).toEqual({ cached_tokens: 0 });
  });
});
