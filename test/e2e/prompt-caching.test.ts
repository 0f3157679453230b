import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Prompt caching and reasoning as each API shows them, with the SDKs their users install: a
// conversation's second turn is served partly from the demo model's prefix cache, reported in
// each API's own shape and charged at the model's cached price (the one cost rule, to the
// micro-dollar); a request that asks for reasoning gets the model's reasoning in each API's shape,
// counted as output.

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** micro-USD per 1M tokens: the demo model's prices here, its cached input at a tenth. */
const PRICES = { input: 500_000n, cached: 50_000n, output: 1_500_000n };
const LOCAL_MODELS = JSON.stringify([
  {
    model_id: "demo-small",
    context_window: 8192,
    input_price_per_1m_usd: "0.50",
    cached_input_price_per_1m_usd: "0.05",
    output_price_per_1m_usd: "1.50",
  },
]);

/** The cost rule: ceil(((input − cached) × input price + cached × cached price + output × output price) / 1M). */
function expectedCostUsd(input: number, cached: number, output: number): number {
  const scaled =
    BigInt(input - cached) * PRICES.input + BigInt(cached) * PRICES.cached + BigInt(output) * PRICES.output;
  return Number((scaled + 999_999n) / 1_000_000n) / 1_000_000;
}

let system: RunningSystem;
let apiKey: string;
let openai: OpenAI;
let anthropic: Anthropic;
beforeAll(async () => {
  system = await startSystem({ registry: { LOCAL_MODELS } });
  ({ apiKey } = await signUp(system.url));
  openai = new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: system.url, apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await system?.close();
});

/** Polls until the request has settled and returns its generation. */
async function settled(id: string): Promise<Json> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const res = await fetch(`${system.url}/v1/generations/${id}`, { headers: { authorization: `Bearer ${apiKey}` } });
    if (res.status === 200) return (await res.json()) as Json;
    if (Date.now() > deadline) throw new Error(`${id} never settled (${res.status})`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A leading system prompt long enough to matter, unique per test so caches never meet. */
const system_prompt = (tag: string) =>
  `You are a careful assistant (${tag}). ` + "Answer briefly and cite the conversation. ".repeat(40);

describe("chat completions", () => {
  it.each([false, true])(
    "reports a second turn's cached tokens and charges them at the cached price (stream: %s)",
    async (stream) => {
      const first = [
        { role: "system" as const, content: system_prompt(`chat-${stream}`) },
        { role: "user" as const, content: "What is a prefix cache?" },
      ];
      const one = await openai.chat.completions.create({ model: "demo-small", messages: first });
      expect(one.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
      const second = [
        ...first,
        { role: "assistant" as const, content: one.choices[0]!.message.content ?? "" },
        { role: "user" as const, content: "And why does it save money?" },
      ];
      let usage: Json;
      let id: string;
      if (stream) {
        const chunks = await openai.chat.completions.create({
          model: "demo-small",
          messages: second,
          stream: true,
          stream_options: { include_usage: true },
        });
        let last: Json | undefined;
        for await (const chunk of chunks) last = chunk;
        usage = last!.usage;
        id = last!.id;
      } else {
        const two = await openai.chat.completions.create({ model: "demo-small", messages: second });
        usage = two.usage!;
        id = two.id;
      }
      const cached = usage.prompt_tokens_details.cached_tokens as number;
      expect(cached).toBeGreaterThan(0);
      expect(cached).toBeLessThan(usage.prompt_tokens);
      expect(usage.cost).toBe(expectedCostUsd(usage.prompt_tokens, cached, usage.completion_tokens));
      const generation = await settled(id);
      expect(generation).toMatchObject({
        input_tokens: usage.prompt_tokens,
        cached_tokens: cached,
        output_tokens: usage.completion_tokens,
        cost_usd: usage.cost,
      });
    },
  );

  it.each([false, true])("relays reasoning and counts its tokens as output (stream: %s)", async (stream) => {
    const messages = [{ role: "user" as const, content: `Think first (${stream}).` }];
    let reasoning = "";
    let usage: Json;
    let id: string;
    if (stream) {
      const chunks = await openai.chat.completions.create({
        model: "demo-small",
        messages,
        reasoning_effort: "low",
        stream: true,
        stream_options: { include_usage: true },
      });
      let last: Json | undefined;
      for await (const chunk of chunks) {
        reasoning += ((chunk.choices[0]?.delta as Json | undefined)?.reasoning_content as string | undefined) ?? "";
        last = chunk;
      }
      usage = last!.usage;
      id = last!.id;
    } else {
      const answer = await openai.chat.completions.create({ model: "demo-small", messages, reasoning_effort: "low" });
      reasoning = (answer.choices[0]!.message as unknown as Json).reasoning_content as string;
      usage = answer.usage!;
      id = answer.id;
    }
    expect(reasoning.length).toBeGreaterThan(0);
    const reasoningTokens = usage.completion_tokens_details.reasoning_tokens as number;
    expect(reasoningTokens).toBeGreaterThan(0);
    expect(reasoningTokens).toBeLessThan(usage.completion_tokens);
    expect(await settled(id)).toMatchObject({
      reasoning_tokens: reasoningTokens,
      output_tokens: usage.completion_tokens,
    });
  });
});

describe("Responses (openai SDK)", () => {
  it.each([false, true])("reports input_tokens_details.cached_tokens on a second turn (stream: %s)", async (stream) => {
    const instructions = system_prompt(`responses-${stream}`);
    const one = await openai.responses.create({ model: "demo-small", instructions, input: "What is a prefix cache?" });
    expect(one.usage?.input_tokens_details.cached_tokens).toBe(0);
    const input = [
      { role: "user" as const, content: "What is a prefix cache?" },
      { role: "assistant" as const, content: one.output_text },
      { role: "user" as const, content: "And why does it save money?" },
    ];
    const two = stream
      ? await openai.responses.stream({ model: "demo-small", instructions, input }).finalResponse()
      : await openai.responses.create({ model: "demo-small", instructions, input });
    const usage = two.usage!;
    expect(usage.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(usage.input_tokens_details.cached_tokens).toBeLessThan(usage.input_tokens);
    const generation = await settled(two.id);
    expect(generation).toMatchObject({
      input_tokens: usage.input_tokens,
      cached_tokens: usage.input_tokens_details.cached_tokens,
    });
    expect((usage as unknown as Json).cost).toBe(generation.cost_usd);
  });

  it.each([false, true])("answers reasoning as a reasoning item with its summary text (stream: %s)", async (stream) => {
    const request = {
      model: "demo-small",
      input: `Think first (responses ${stream}).`,
      reasoning: { effort: "low" as const },
    };
    const response = stream
      ? await openai.responses.stream(request).finalResponse()
      : await openai.responses.create(request);
    const [reasoning, message] = response.output;
    expect(reasoning).toMatchObject({ type: "reasoning", summary: [{ type: "summary_text" }] });
    expect((reasoning as Json).summary[0].text.length).toBeGreaterThan(0);
    expect(message).toMatchObject({ type: "message" });
    expect(response.output_text.length).toBeGreaterThan(0);
    expect(response.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    expect(await settled(response.id)).toMatchObject({
      reasoning_tokens: response.usage!.output_tokens_details.reasoning_tokens,
    });
  });
});

describe("Messages (@anthropic-ai/sdk)", () => {
  it.each([false, true])(
    "reports cache_read_input_tokens, input_tokens the fresh part only (stream: %s)",
    async (stream) => {
      const systemText = system_prompt(`messages-${stream}`);
      const one = await anthropic.messages.create({
        model: "demo-small",
        max_tokens: 256,
        system: systemText,
        messages: [{ role: "user", content: "What is a prefix cache?" }],
      });
      expect(one.usage.cache_read_input_tokens).toBe(0);
      const text = one.content.map((block) => (block.type === "text" ? block.text : "")).join("");
      const request = {
        model: "demo-small",
        max_tokens: 256,
        system: systemText,
        messages: [
          { role: "user" as const, content: "What is a prefix cache?" },
          { role: "assistant" as const, content: text },
          { role: "user" as const, content: "And why does it save money?" },
        ],
      };
      const two = stream
        ? await anthropic.messages.stream(request).finalMessage()
        : await anthropic.messages.create(request);
      const cached = two.usage.cache_read_input_tokens!;
      expect(cached).toBeGreaterThan(0);
      const generation = await settled(two.id);
      // Anthropic's meaning: input_tokens is what was not read from the cache.
      expect(two.usage.input_tokens + cached).toBe(generation.input_tokens);
      expect(generation.cached_tokens).toBe(cached);
      expect(two.usage.output_tokens).toBe(generation.output_tokens);
    },
  );

  it.each([false, true])("sends thinking blocks when the client turned thinking on (stream: %s)", async (stream) => {
    const request = {
      model: "demo-small",
      max_tokens: 512,
      thinking: { type: "enabled" as const, budget_tokens: 256 },
      messages: [{ role: "user" as const, content: `Think first (messages ${stream}).` }],
    };
    const message = stream
      ? await anthropic.messages.stream(request).finalMessage()
      : await anthropic.messages.create(request);
    const [thinking, text] = message.content;
    expect(thinking).toMatchObject({ type: "thinking" });
    expect((thinking as Json).thinking.length).toBeGreaterThan(0);
    expect(text).toMatchObject({ type: "text" });
    const generation = await settled(message.id);
    expect(generation.reasoning_tokens).toBeGreaterThan(0);
    expect(message.usage.output_tokens).toBe(generation.output_tokens);
  });

  it("sends no thinking blocks when thinking is not on, though the effort asks the model to reason", async () => {
    const message = await anthropic.messages.create({
      model: "demo-small",
      max_tokens: 512,
      output_config: { effort: "high" },
      messages: [{ role: "user", content: "Think quietly." }],
    } as Anthropic.MessageCreateParamsNonStreaming);
    expect(message.content.map((block) => block.type)).toEqual(["text"]);
  });
});

describe("usage reports", () => {
  it("sum cached input tokens beside input tokens and export them as the CSV's last column", async () => {
    const headers = { authorization: `Bearer ${apiKey}` };
    // Every request above has settled (each test waited for its generation).
    const tokens = (await (
      await fetch(`${system.url}/v1/usage/tokens?days=1&interval=day`, { headers })
    ).json()) as Json;
    expect(tokens.totals.cached_input_tokens).toBeGreaterThan(0);
    expect(tokens.totals.cached_input_tokens).toBeLessThan(tokens.totals.input_tokens);
    const summary = (await (await fetch(`${system.url}/v1/usage`, { headers })).json()) as Json;
    expect(summary.usage_30d.total_cached_input_tokens).toBe(tokens.totals.cached_input_tokens);
    const breakdown = (await (await fetch(`${system.url}/v1/usage/breakdown?days=1`, { headers })).json()) as Json;
    const byModel = breakdown.by_model as Json[];
    expect(byModel.reduce((sum, m) => sum + (m.cached_input_tokens as number), 0)).toBe(
      tokens.totals.cached_input_tokens,
    );
    const csv = await (await fetch(`${system.url}/v1/usage/export?days=1`, { headers })).text();
    const [header, ...rows] = csv.trim().split("\n");
    expect(header!.split(",").at(-1)).toBe("cached_tokens");
    const exported = rows.reduce((sum, row) => sum + Number(row.split(",").at(-1)), 0);
    expect(exported).toBe(tokens.totals.cached_input_tokens);
  });
});
