import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { costMicros } from "@mkt/runtime/money";
import { countPromptTokens } from "@mkt/runtime/tokens";
import { DEMO_PRICES, signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// Tool calls and structured output through the whole relay (edge → registry → demo model), read
// by real clients, streamed and not, over chat completions and the Responses API; and a
// tool-call-only answer metered and charged like any other.

interface Usage {
  usage_30d: {
    total_requests: number;
    total_input_tokens: number;
    total_output_tokens: number;
    total_cost_microdollars: number;
  };
}

const weatherArgs = z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) });
const chatTools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: "function",
    function: { name: "get_weather", description: "Weather for a city.", parameters: z.toJSONSchema(weatherArgs) },
  },
];
const responsesTools: OpenAI.Responses.FunctionTool[] = [
  {
    type: "function",
    name: "get_weather",
    description: "Weather for a city.",
    parameters: z.toJSONSchema(weatherArgs),
    strict: true,
  },
];

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

async function customer() {
  const { apiKey } = await signUp(system.url);
  return { apiKey, client: new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 }) };
}

describe("a tool round trip over chat completions", () => {
  it.each([false, true])("call → tool result → answer (stream: %s)", async (stream) => {
    const { client } = await customer();
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: "user", content: "Weather in Oslo? call get_weather" },
    ];
    const ask = (history: OpenAI.Chat.ChatCompletionMessageParam[]) =>
      stream
        ? client.chat.completions
            .stream({ model: "auto", messages: history, tools: chatTools, stream_options: { include_usage: true } })
            .finalChatCompletion()
        : client.chat.completions.create({ model: "auto", messages: history, tools: chatTools });

    const first = await ask(messages);
    expect(first.choices[0]!.finish_reason).toBe("tool_calls");
    const call = first.choices[0]!.message.tool_calls![0]!;
    if (call.type !== "function") throw new Error("not a function call");
    expect(call.function.name).toBe("get_weather");
    expect(weatherArgs.safeParse(JSON.parse(call.function.arguments)).error).toBeUndefined();
    expect(first.usage!.completion_tokens).toBeGreaterThan(0);

    const result: OpenAI.Chat.ChatCompletionMessageParam = { role: "tool", tool_call_id: call.id, content: '{"c": 3}' };
    const final = await ask([...messages, first.choices[0]!.message, result]);
    expect(final.choices[0]!.finish_reason).toBe("stop");
    expect(final.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });
});

describe("a tool round trip over the Responses API", () => {
  it.each([false, true])("call → function_call_output → answer (stream: %s)", async (stream) => {
    const { client } = await customer();
    const input: OpenAI.Responses.ResponseInputItem[] = [
      { role: "user", content: "Weather in Oslo? call get_weather" },
    ];
    const ask = async (items: OpenAI.Responses.ResponseInputItem[]) => {
      if (!stream) return client.responses.create({ model: "auto", input: items, tools: responsesTools });
      const events: OpenAI.Responses.ResponseStreamEvent[] = [];
      const s = await client.responses.create({ model: "auto", input: items, tools: responsesTools, stream: true });
      for await (const event of s) events.push(event);
      const last = events.at(-1)!;
      if (last.type !== "response.completed") throw new Error(`ended with ${last.type}`);
      return Object.assign(last.response, { events });
    };

    const first = await ask(input);
    const call = first.output.find((item) => item.type === "function_call");
    if (!call || call.type !== "function_call") throw new Error("no function call");
    expect(call).toMatchObject({ name: "get_weather", status: "completed", call_id: expect.stringMatching(/^call_/) });
    expect(weatherArgs.safeParse(JSON.parse(call.arguments)).error).toBeUndefined();
    expect(first.output).toHaveLength(1); // a call only, no text
    expect(first.usage!.output_tokens).toBeGreaterThan(0);
    if ("events" in first) {
      const events = first.events as OpenAI.Responses.ResponseStreamEvent[];
      expect(events.map((e) => e.type)).toEqual([
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        ...events.slice(3, -3).map(() => "response.function_call_arguments.delta"),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
      ]);
      const args = events.flatMap((e) => (e.type === "response.function_call_arguments.delta" ? [e.delta] : []));
      expect(args.join("")).toBe(call.arguments);
    }

    const final = await ask([
      ...input,
      { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: '{"c": 3}' },
    ]);
    expect(final.status).toBe("completed");
    expect(final.output).toEqual([expect.objectContaining({ type: "message" })]);
    const message = final.output[0]!;
    if (message.type !== "message") throw new Error("not a message");
    expect(message.content).toEqual([
      expect.objectContaining({ type: "output_text", text: expect.stringMatching(/\w/) }),
    ]);
  });
});

describe("the Vercel AI SDK runs tools and structured output on the default provider", () => {
  it.each([false, true])("runs a tool and answers with its result (stream: %s)", async (stream) => {
    const { apiKey } = await customer();
    const openai = createOpenAI({ baseURL: `${system.url}/v1`, apiKey });
    const seen: unknown[] = [];
    const tools = {
      get_weather: tool({
        description: "Weather for a city.",
        inputSchema: weatherArgs,
        execute: async (args) => {
          seen.push(args);
          return { temperature: 21 };
        },
      }),
    };
    const options = {
      model: openai("demo-small"),
      prompt: "Weather in Oslo? call get_weather",
      tools,
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    };
    const result = stream ? streamText(options) : await generateText(options);
    const steps = await result.steps;
    expect(steps.map((step) => step.finishReason)).toEqual(["tool-calls", "stop"]);
    expect(seen).toHaveLength(1);
    expect(weatherArgs.safeParse(seen[0]).error).toBeUndefined();
    expect((await result.text).length).toBeGreaterThan(0);
  });

  it("generates an object valid against a zod schema (Output.object)", async () => {
    const { apiKey } = await customer();
    const openai = createOpenAI({ baseURL: `${system.url}/v1`, apiKey });
    const recipe = z.object({
      name: z.string(),
      servings: z.number().int().min(1).max(8),
      ingredients: z.array(z.object({ name: z.string(), grams: z.number().positive() })).min(1),
      vegetarian: z.boolean(),
    });
    const { output } = await generateText({
      model: openai("demo-small"),
      prompt: "A soup recipe.",
      output: Output.object({ schema: recipe }),
      maxRetries: 0,
    });
    expect(recipe.safeParse(output).error).toBeUndefined();

    const streamed = streamText({
      model: openai("demo-small"),
      prompt: "A soup recipe.",
      output: Output.object({ schema: recipe }),
      maxRetries: 0,
    });
    expect(await streamed.output).toEqual(output);
  });
});

describe("structured output over chat completions", () => {
  it("parses a json_schema answer with the SDK's own helper, streamed and not", async () => {
    const { client } = await customer();
    const event = z.object({ title: z.string(), attendees: z.array(z.string()).min(1), day: z.enum(["mon", "tue"]) });
    const response_format = {
      type: "json_schema" as const,
      json_schema: { name: "event", strict: true, schema: z.toJSONSchema(event) },
    };
    const messages = [{ role: "user" as const, content: "Plan an event." }];
    const plain = await client.chat.completions.create({ model: "auto", messages, response_format });
    const parsed = event.parse(JSON.parse(plain.choices[0]!.message.content!));
    const streamed = await client.chat.completions
      .stream({ model: "auto", messages, response_format })
      .finalChatCompletion();
    expect(JSON.parse(streamed.choices[0]!.message.content!)).toEqual(parsed);
  });
});

describe("a tool-call-only answer is metered and charged", () => {
  it.each(["chat", "responses"])("over %s: output tokens > 0, and the cost in /v1/usage", async (api) => {
    const { apiKey, client } = await customer();
    const { input, output } =
      api === "chat"
        ? await client.chat.completions
            .create({
              model: "auto",
              messages: [{ role: "user", content: "Weather? call get_weather" }],
              tools: chatTools,
            })
            .then((c) => ({ input: c.usage!.prompt_tokens, output: c.usage!.completion_tokens }))
        : await client.responses
            .create({ model: "auto", input: "Weather? call get_weather", tools: responsesTools })
            .then((r) => ({ input: r.usage!.input_tokens, output: r.usage!.output_tokens }));
    expect(output).toBeGreaterThan(0);
    // The tool definitions are prompt text: counted, and so billed, with the message.
    const asked = [{ role: "user", content: "Weather? call get_weather" }];
    expect(input).toBe(countPromptTokens(asked, { tools: chatTools }));
    expect(input).toBeGreaterThan(countPromptTokens(asked) + 10);
    const cost = Number(costMicros(BigInt(input), BigInt(output), DEMO_PRICES.input, DEMO_PRICES.output));
    expect(cost).toBeGreaterThan(0);
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 1);
    expect(usage.usage_30d).toMatchObject({
      total_input_tokens: input,
      total_output_tokens: output,
      total_cost_microdollars: cost,
    });
  });
});
