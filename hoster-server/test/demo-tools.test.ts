import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { HosterServerHandle } from "../src/server.ts";
import { startServer } from "./harness.ts";

// The demo model's tool calls and structured output, read by the official SDK (its stream helper
// assembles tool-call deltas the way every client does, and fails on a malformed one).

const weatherArgs = z.object({
  city: z.string(),
  unit: z.enum(["celsius", "fahrenheit"]),
  days: z.number().int().min(1).max(7),
});
const tools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: "function",
    function: { name: "get_weather", description: "Weather for a city.", parameters: z.toJSONSchema(weatherArgs) },
  },
  {
    type: "function",
    function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string" } } } },
  },
];
// Under tool_choice auto the demo model calls a tool only when the last user message asks.
const user: OpenAI.Chat.ChatCompletionMessageParam = { role: "user", content: "Weather in Paris? call get_weather" };
const chatOnly: OpenAI.Chat.ChatCompletionMessageParam = { role: "user", content: "Weather in Paris?" };

let server: HosterServerHandle;
let client: OpenAI;
beforeAll(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "test-token", maxRetries: 0 });
});
afterAll(async () => {
  await server?.close();
});

describe("tools", () => {
  it("calls the tool asked for with arguments valid against its schema, the same streamed and not", async () => {
    const plain = await client.chat.completions.create({ model: "demo-small", messages: [user], tools });
    const choice = plain.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    const call = choice.message.tool_calls![0]!;
    expect(call).toMatchObject({ type: "function", id: expect.stringMatching(/^call_/) });
    if (call.type !== "function") throw new Error("not a function call");
    expect(call.function.name).toBe("get_weather");
    expect(weatherArgs.safeParse(JSON.parse(call.function.arguments)).error).toBeUndefined();
    expect(plain.usage!.completion_tokens).toBe(countTextTokens(call.function.name + call.function.arguments));

    const streamed = await client.chat.completions
      .stream({ model: "demo-small", messages: [user], tools, stream_options: { include_usage: true } })
      .finalChatCompletion();
    expect(streamed.choices[0]!.finish_reason).toBe("tool_calls");
    expect(streamed.choices[0]!.message.tool_calls).toEqual(choice.message.tool_calls);
    expect(streamed.usage).toEqual(plain.usage);
  });

  it("answers text under auto when not asked for a tool, and calls the first one when one is required", async () => {
    const text = await client.chat.completions.create({ model: "demo-small", messages: [chatOnly], tools });
    expect(text.choices[0]!.finish_reason).toBe("stop");
    expect(text.choices[0]!.message.tool_calls).toBeUndefined();
    expect(text.choices[0]!.message.content!.length).toBeGreaterThan(0);
    const required = await client.chat.completions.create({
      model: "demo-small",
      messages: [chatOnly],
      tools,
      tool_choice: "required",
    });
    const call = required.choices[0]!.message.tool_calls![0]!;
    expect(call.type === "function" && call.function.name).toBe("get_weather");
  });

  it("calls a tool with the JSON arguments the user gave", async () => {
    const asked = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: 'Time, please: call get_time {"zone": "Europe/Paris"}' }],
      tools,
    });
    const call = asked.choices[0]!.message.tool_calls![0]!;
    if (call.type !== "function") throw new Error("not a function call");
    expect(call.function.name).toBe("get_time");
    expect(JSON.parse(call.function.arguments)).toEqual({ zone: "Europe/Paris" });
    const unknown = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "call get_stock {}" }],
      tools,
    });
    expect(unknown.choices[0]!.finish_reason).toBe("stop");
  });

  it("calls the tool tool_choice names, and none with tool_choice none", async () => {
    const named = await client.chat.completions.create({
      model: "demo-small",
      messages: [user],
      tools,
      tool_choice: { type: "function", function: { name: "get_time" } },
    });
    const call = named.choices[0]!.message.tool_calls![0]!;
    expect(call.type === "function" && call.function.name).toBe("get_time");
    const none = await client.chat.completions.create({
      model: "demo-small",
      messages: [user],
      tools,
      tool_choice: "none",
    });
    expect(none.choices[0]!.message.tool_calls).toBeUndefined();
    expect(none.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });

  it("answers text once the last message is the tool's result", async () => {
    const first = await client.chat.completions.create({ model: "demo-small", messages: [user], tools });
    const assistant = first.choices[0]!.message;
    const result: OpenAI.Chat.ChatCompletionMessageParam = {
      role: "tool",
      tool_call_id: assistant.tool_calls![0]!.id,
      content: '{"temperature": 21}',
    };
    const final = await client.chat.completions.create({
      model: "demo-small",
      messages: [user, assistant, result],
      tools,
    });
    expect(final.choices[0]!.finish_reason).toBe("stop");
    expect(final.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });

  it("calls when only instructions follow the user's request, as a system message from Claude Code does", async () => {
    for (const role of ["system", "developer"] as const) {
      const asked = await client.chat.completions.create({
        model: "demo-small",
        messages: [user, { role, content: "Agents available: general-purpose, Explore." }],
        tools,
      });
      expect(asked.choices[0]!.finish_reason).toBe("tool_calls");
      const call = asked.choices[0]!.message.tool_calls![0]!;
      expect(call.type === "function" && call.function.name).toBe("get_weather");
    }
  });

  it("answers text after the tool's result even when a system message follows it, so the loop ends", async () => {
    const first = await client.chat.completions.create({ model: "demo-small", messages: [user], tools });
    const assistant = first.choices[0]!.message;
    const final = await client.chat.completions.create({
      model: "demo-small",
      messages: [
        user,
        assistant,
        { role: "tool", tool_call_id: assistant.tool_calls![0]!.id, content: '{"temperature": 21}' },
        { role: "system", content: "Agents available: general-purpose, Explore." },
      ],
      tools,
    });
    expect(final.choices[0]!.finish_reason).toBe("stop");
    expect(final.choices[0]!.message.tool_calls).toBeUndefined();
    expect(final.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });

  it("cuts the arguments at max_tokens with finish_reason length", async () => {
    const cut = await client.chat.completions.create({ model: "demo-small", messages: [user], tools, max_tokens: 3 });
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(cut.usage!.completion_tokens).toBeLessThanOrEqual(3 + countTextTokens("get_weather"));
  });

  it("refuses a tool_choice naming a function not in tools", async () => {
    await expect(
      client.chat.completions.create({
        model: "demo-small",
        messages: [user],
        tools,
        tool_choice: { type: "function", function: { name: "nope" } },
      }),
    ).rejects.toMatchObject({ status: 400, param: "tool_choice" });
  });
});

describe("response_format json_schema", () => {
  const recipe = z.object({
    name: z.string(),
    servings: z.number().int().min(1).max(8),
    steps: z.array(z.string()).min(1),
  });
  const format = {
    type: "json_schema" as const,
    json_schema: { name: "recipe", strict: true, schema: z.toJSONSchema(recipe) },
  };

  it("answers a document valid against the schema, the same streamed and not", async () => {
    const messages = [{ role: "user" as const, content: "A recipe, please." }];
    const plain = await client.chat.completions.create({ model: "demo-small", messages, response_format: format });
    const text = plain.choices[0]!.message.content!;
    expect(recipe.safeParse(JSON.parse(text)).error).toBeUndefined();
    expect(plain.choices[0]!.finish_reason).toBe("stop");
    expect(plain.usage!.completion_tokens).toBe(countTextTokens(text));
    const streamed = await client.chat.completions
      .stream({ model: "demo-small", messages, response_format: format })
      .finalChatCompletion();
    expect(streamed.choices[0]!.message.content).toBe(text);
  });

  it("answers json_object with a JSON object", async () => {
    const answer = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "JSON please" }],
      response_format: { type: "json_object" },
    });
    expect(JSON.parse(answer.choices[0]!.message.content!)).toEqual({});
  });
});
