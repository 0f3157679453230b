import { createAnthropic } from "@ai-sdk/anthropic";
import { ChatAnthropic } from "@langchain/anthropic";
import { tool as langchainTool } from "@langchain/core/tools";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { CLAUDE_CODE_HEADERS, claudeCodeTurn } from "./fixtures/claude-code-request.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// The Messages API as the other clients that speak it call it: the Vercel AI SDK's Anthropic
// provider, LangChain's ChatAnthropic, and Claude Code's own requests (a recorded fixture).

let system: RunningSystem;
let apiKey: string;
beforeAll(async () => {
  system = await startSystem();
  ({ apiKey } = await signUp(system.url));
});
afterAll(async () => {
  await system?.close();
});

const weatherArgs = z.object({ city: z.string() });

describe("Vercel AI SDK (@ai-sdk/anthropic)", () => {
  const model = () => createAnthropic({ baseURL: `${system.url}/v1`, apiKey })("claude-sonnet-4-5");

  it("generates and streams text", async () => {
    const generated = await generateText({ model: model(), prompt: "Hello!", maxRetries: 0 });
    expect(generated.text.length).toBeGreaterThan(0);
    expect(generated.finishReason).toBe("stop");
    expect(generated.usage.inputTokens).toBeGreaterThan(0);
    const streamed = streamText({ model: model(), prompt: "Hello!", maxRetries: 0 });
    let text = "";
    for await (const delta of streamed.textStream) text += delta;
    expect(text).toBe(generated.text);
  });

  it.each([false, true])("runs a tool and answers with its result (stream: %s)", async (stream) => {
    const seen: unknown[] = [];
    const tools = {
      get_weather: tool({
        description: "Weather for a city.",
        inputSchema: weatherArgs,
        execute: async (args) => {
          seen.push(args);
          return { temp_c: 4 };
        },
      }),
    };
    const options = {
      model: model(),
      prompt: 'Weather in Oslo? call get_weather {"city": "Oslo"}',
      tools,
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    };
    const result = stream ? streamText(options) : await generateText(options);
    const steps = await result.steps;
    expect(steps.map((step) => step.finishReason)).toEqual(["tool-calls", "stop"]);
    expect(seen).toEqual([{ city: "Oslo" }]);
    expect((await result.text).length).toBeGreaterThan(0);
  });
});

describe("LangChain (@langchain/anthropic)", () => {
  const chat = () =>
    new ChatAnthropic({
      model: "claude-haiku-4-5",
      apiKey,
      anthropicApiUrl: system.url,
      maxTokens: 256,
      maxRetries: 0,
    });

  it("invokes and streams", async () => {
    const answer = await chat().invoke("Hello!");
    expect(typeof answer.content === "string" ? answer.content : answer.text).toMatch(/\w/);
    let text = "";
    for await (const chunk of await chat().stream("Hello!")) text += chunk.text;
    expect(text).toBe(answer.text);
  });

  it("calls a bound tool", async () => {
    const weather = langchainTool(async ({ city }: { city: string }) => `4 degrees in ${city}`, {
      name: "get_weather",
      description: "Weather for a city.",
      schema: weatherArgs,
    });
    const answer = await chat().bindTools([weather]).invoke('Weather in Oslo? call get_weather {"city": "Oslo"}');
    expect(answer.tool_calls).toEqual([expect.objectContaining({ name: "get_weather", args: { city: "Oslo" } })]);
  });
});

// The fast check of Claude Code's request as recorded; claude-code.test.ts runs the binary itself.
describe("Claude Code's requests (recorded fixture)", () => {
  it("answers its main turn (a system message after the user's, 64,000-token cap, adaptive thinking, effort, context_management, 24 tools)", async () => {
    const res = await fetch(`${system.url}/v1/messages?beta=true`, {
      method: "POST",
      headers: { ...CLAUDE_CODE_HEADERS, authorization: `Bearer ${apiKey}` },
      body: JSON.stringify(claudeCodeTurn),
    });
    const body = await res.text();
    expect(res.status, body).toBe(200);
    const events = [...body.matchAll(/^event: (\w+)$/gm)].map((m) => m[1]);
    expect(events.slice(0, 2)).toEqual(["message_start", "ping"]);
    expect(events).toContain("content_block_delta");
    expect(events.at(-1)).toBe("message_stop");
    expect(events).not.toContain("error");
    // Not asked to call a tool, the demo model answers text: the agent's turn ends.
    expect(body).toMatch(/"stop_reason":"end_turn"/);
  });

  it("answers it unstreamed too", async () => {
    const res = await fetch(`${system.url}/v1/messages?beta=true`, {
      method: "POST",
      headers: { ...CLAUDE_CODE_HEADERS, "x-api-key": apiKey },
      body: JSON.stringify({ ...claudeCodeTurn, stream: false }),
    });
    const body = await res.text();
    expect(res.status, body).toBe(200);
    expect(JSON.parse(body)).toMatchObject({ type: "message", stop_reason: "end_turn", model: "demo-agent" });
  });

  it("finds its model names in /v1/models", async () => {
    const res = await fetch(`${system.url}/v1/models`, { headers: { authorization: `Bearer ${apiKey}` } });
    const { data } = (await res.json()) as { data: Array<{ id: string; alias_for?: string; context_window: number }> };
    expect(data).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: "demo-agent", context_window: 200_000 }),
        expect.objectContaining({ id: "claude-opus-4-8[1m]", alias_for: "demo-agent" }),
        expect.objectContaining({ id: "gpt-5-codex", alias_for: "demo-agent" }),
      ]),
    );
  });
});
