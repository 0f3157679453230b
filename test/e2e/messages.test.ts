import type { APIError } from "@anthropic-ai/sdk";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros, microsToUsd } from "@mkt/runtime/money";
import { DEMO_PRICES, signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

// POST /v1/messages and /v1/messages/count_tokens with Anthropic's own SDK: the answer travels
// the chat path (admission, relay, metering) and is billed like any chat completion.

interface Usage {
  usage_30d: { total_requests: number; total_input_tokens: number; total_output_tokens: number };
}

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

async function customer() {
  const { apiKey } = await signUp(system.url);
  return { apiKey, client: new Anthropic({ baseURL: system.url, apiKey, maxRetries: 0 }) };
}

const weatherTool: Anthropic.Tool = {
  name: "get_weather",
  description: "Weather for a city.",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

const costOf = (input: number, output: number) =>
  microsToUsd(costMicros(BigInt(input), BigInt(output), DEMO_PRICES.input, DEMO_PRICES.output));

describe("messages.create and messages.stream (official Anthropic SDK)", () => {
  it("answers a message with text, end_turn and usage with cost, billed as the chat path bills", async () => {
    const { apiKey, client } = await customer();
    const message = await client.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 1024,
      system: "Be brief.",
      messages: [{ role: "user", content: "Tell me about marketplaces." }],
    });
    expect(message).toMatchObject({ type: "message", role: "assistant", stop_reason: "end_turn", stop_sequence: null });
    expect(message.id).toMatch(/^msg_/);
    expect(message.model).toBe("demo-agent");
    expect(message.content).toEqual([{ type: "text", text: expect.stringMatching(/\w/) }]);
    const { input_tokens, output_tokens } = message.usage;
    expect(input_tokens).toBeGreaterThan(0);
    expect(output_tokens).toBeGreaterThan(0);
    expect((message.usage as unknown as { cost: number }).cost).toBe(costOf(input_tokens, output_tokens));

    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 1);
    expect(usage.usage_30d).toMatchObject({ total_input_tokens: input_tokens, total_output_tokens: output_tokens });
    const generation = await fetch(`${system.url}/v1/generations/${message.id}`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    expect(generation.status).toBe(200);
  });

  it("streams text deltas in Anthropic's event sequence, ending with the same usage as the whole answer", async () => {
    const { client } = await customer();
    const params = {
      model: "demo-agent",
      max_tokens: 1024,
      messages: [{ role: "user" as const, content: "Stream something." }],
    };
    const whole = await client.messages.create(params);
    const stream = client.messages.stream(params);
    const types: string[] = [];
    let text = "";
    let deltaUsage: unknown;
    stream.on("streamEvent", (event) => {
      types.push(event.type);
      if (event.type === "message_delta") deltaUsage = event.usage;
    });
    stream.on("text", (delta) => (text += delta));
    const final = await stream.finalMessage();

    expect(types.slice(0, 2)).toEqual(["message_start", "content_block_start"]);
    expect(types.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(new Set(types.slice(2, -3))).toEqual(new Set(["content_block_delta"]));
    expect(text).toBe((whole.content[0] as Anthropic.TextBlock).text);
    expect(final.content).toEqual(whole.content);
    expect(final.stop_reason).toBe("end_turn");
    // The SDK keeps the usage fields it knows; `cost` is in the message_delta event it read.
    expect(deltaUsage).toEqual(whole.usage);
    const { cost, ...counts } = whole.usage as Anthropic.Usage & { cost: number };
    expect(cost).toBeGreaterThan(0);
    expect(final.usage).toMatchObject(counts);
  });

  it("sends ping after message_start, as Anthropic's stream does", async () => {
    const { apiKey } = await customer();
    const res = await fetch(`${system.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "demo-agent",
        max_tokens: 64,
        stream: true,
        messages: [{ role: "user", content: "hi" }],
      }),
    });
    expect(res.status).toBe(200);
    const events = [...(await res.text()).matchAll(/^event: (\w+)$/gm)].map((m) => m[1]);
    expect(events.slice(0, 2)).toEqual(["message_start", "ping"]);
    expect(events.at(-1)).toBe("message_stop");
  });

  it("stops at max_tokens with stop_reason max_tokens", async () => {
    const { client } = await customer();
    const cut = await client.messages.create({
      model: "demo-agent",
      max_tokens: 3,
      messages: [{ role: "user", content: "Go on and on." }],
    });
    expect(cut.stop_reason).toBe("max_tokens");
    expect(cut.usage.output_tokens).toBeLessThanOrEqual(3);
  });

  it("runs a tool round trip: tool_use, then tool_result, then a text answer", async () => {
    const { client } = await customer();
    const ask: Anthropic.MessageParam = { role: "user", content: 'Weather? call get_weather {"city": "Oslo"}' };
    const first = await client.messages.create({
      model: "demo-agent",
      max_tokens: 1024,
      tools: [weatherTool],
      messages: [ask],
    });
    expect(first.stop_reason).toBe("tool_use");
    const use = first.content.find((block) => block.type === "tool_use");
    expect(use).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Oslo" } });

    const streamed = await client.messages
      .stream({ model: "demo-agent", max_tokens: 1024, tools: [weatherTool], messages: [ask] })
      .finalMessage();
    expect(streamed.content).toEqual(first.content);
    expect(streamed.stop_reason).toBe("tool_use");

    const answer = await client.messages.create({
      model: "demo-agent",
      max_tokens: 1024,
      tools: [weatherTool],
      messages: [
        ask,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use!.id, content: '{"temp_c": 4}' }] },
      ],
    });
    expect(answer.stop_reason).toBe("end_turn");
    expect(answer.content).toEqual([{ type: "text", text: expect.stringMatching(/\w/) }]);
  });

  it("answers text under tool_choice auto when no tool is asked for, and calls one under any", async () => {
    const { client } = await customer();
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather like?" }];
    const text = await client.messages.create({ model: "demo-agent", max_tokens: 256, tools: [weatherTool], messages });
    expect(text.stop_reason).toBe("end_turn");
    const forced = await client.messages.create({
      model: "demo-agent",
      max_tokens: 256,
      tools: [weatherTool],
      tool_choice: { type: "any" },
      messages,
    });
    expect(forced.stop_reason).toBe("tool_use");
  });

  it("counts a prompt's tokens without charging for it", async () => {
    const { apiKey, client } = await customer();
    const params = {
      model: "demo-agent",
      system: "Be brief.",
      tools: [weatherTool],
      messages: [{ role: "user" as const, content: "Tell me about marketplaces." }],
    };
    const counted = await client.messages.countTokens(params);
    const message = await client.messages.create({ ...params, max_tokens: 64 });
    expect(counted.input_tokens).toBe(message.usage.input_tokens);
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests >= 1);
    expect(usage.usage_30d.total_requests).toBe(1);
  });
});

describe("keys, versions and errors in Anthropic's shape", () => {
  it("takes the key as a Bearer token too (Claude Code's ANTHROPIC_AUTH_TOKEN)", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new Anthropic({ baseURL: system.url, authToken: apiKey, apiKey: null, maxRetries: 0 });
    // A cap this large is streamed, as the SDK requires (and Claude Code does).
    const message = await client.beta.messages
      .stream({
        model: "claude-opus-4-8[1m]",
        max_tokens: 32_000,
        betas: ["context-1m-2025-08-07", "interleaved-thinking-2025-05-14"],
        messages: [{ role: "user", content: "hi" }],
      })
      .finalMessage();
    expect(message.model).toBe("demo-agent");
    expect(message.stop_reason).toBe("end_turn");
  });

  it("raises the SDK's AuthenticationError for a bad key", async () => {
    const client = new Anthropic({ baseURL: system.url, apiKey: "sk-not-a-key", maxRetries: 0 });
    const error = await client.messages
      .create({ model: "demo-agent", max_tokens: 16, messages: [{ role: "user", content: "hi" }] })
      .catch((err: unknown) => err);
    expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((error as APIError).error).toMatchObject({
      type: "error",
      error: { type: "authentication_error", code: "invalid_api_key" },
    });
  });

  it("answers an unknown model 404 not_found_error, and a bad body 400 invalid_request_error", async () => {
    const { client } = await customer();
    const unknown = await client.messages
      .create({ model: "no-such-model", max_tokens: 16, messages: [{ role: "user", content: "hi" }] })
      .catch((err: unknown) => err);
    expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
    expect((unknown as APIError).error).toMatchObject({ error: { type: "not_found_error" } });

    const missingCap = await client.messages
      .create({ model: "demo-agent", messages: [{ role: "user", content: "hi" }] } as never)
      .catch((err: unknown) => err);
    expect(missingCap).toBeInstanceOf(Anthropic.BadRequestError);
    expect((missingCap as APIError).error).toMatchObject({
      error: { type: "invalid_request_error", param: "max_tokens" },
    });

    const serverTool = await client.messages
      .create({
        model: "demo-agent",
        max_tokens: 16,
        tools: [{ type: "web_search_20250305", name: "web_search" }],
        messages: [{ role: "user", content: "hi" }],
      })
      .catch((err: unknown) => err);
    expect((serverTool as APIError).error).toMatchObject({
      error: { type: "invalid_request_error", param: "tools[0].type" },
    });
  });
});
