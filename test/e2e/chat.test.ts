import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { DEMO_PRICES, signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

interface Usage {
  credit_balance_usd: number;
  rate_limits: Record<string, number>;
  usage_30d: {
    total_requests: number;
    total_input_tokens: number;
    total_output_tokens: number;
    total_cost_microdollars: number;
    avg_latency_ms: number;
  };
}

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem();
});
afterAll(async () => {
  await system?.close();
});

const expectedCost = (input: number, output: number) =>
  costMicros(BigInt(input), BigInt(output), DEMO_PRICES.input, DEMO_PRICES.output);

describe("chat through edge → gRPC → upstream, with the official openai client", () => {
  it("answers a non-streaming request and charges exactly its cost", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });
    const completion = await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "Say something about marketplaces." }],
    });
    expect(completion.object).toBe("chat.completion");
    expect(completion.model).toBe("demo-small");
    expect(completion.choices[0]!.message.content!.length).toBeGreaterThan(0);
    const { prompt_tokens, completion_tokens } = completion.usage!;
    expect(prompt_tokens).toBeGreaterThan(0);
    expect(completion_tokens).toBeGreaterThan(0);

    // Settled, and the edge's report of the request admitted has reached billing: rate-limit
    // figures trail admission by up to one heartbeat (the cold grant was made before admitting).
    const usage = await waitForUsage<Usage>(
      system.url,
      apiKey,
      (u) => u.usage_30d.total_requests === 1 && u.rate_limits.requests_today === 1,
    );
    const cost = expectedCost(prompt_tokens, completion_tokens);
    expect(usage.usage_30d).toMatchObject({
      total_requests: 1,
      total_input_tokens: prompt_tokens,
      total_output_tokens: completion_tokens,
      total_cost_microdollars: Number(cost),
    });
    expect(Math.round(usage.credit_balance_usd * 1e6)).toBe(5_000_000 - Number(cost));
    expect(usage.rate_limits).toMatchObject({ requests_this_minute: 1, requests_today: 1, limit_per_minute: 60 });
  });

  it("streams, and sends the usage chunk only when include_usage is set", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });

    const plain = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "Stream please." }],
      stream: true,
    });
    let plainText = "";
    for await (const chunk of plain) {
      expect(chunk.usage ?? null).toBeNull();
      plainText += chunk.choices[0]?.delta.content ?? "";
    }
    expect(plainText.length).toBeGreaterThan(0);

    const withUsage = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "Stream please." }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usageChunk: OpenAI.CompletionUsage | undefined;
    for await (const chunk of withUsage) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usageChunk = chunk.usage;
    }
    expect(text).toBe(plainText); // the demo model is deterministic
    expect(usageChunk!.completion_tokens).toBeGreaterThan(0);

    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 2);
    const cost = 2n * expectedCost(usageChunk!.prompt_tokens, usageChunk!.completion_tokens);
    expect(usage.usage_30d.total_cost_microdollars).toBe(Number(cost));
    expect(Math.round(usage.credit_balance_usd * 1e6)).toBe(5_000_000 - Number(cost));
  });

  it("ends an SSE stream with data: [DONE]", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }], stream: true }),
    });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    expect(res.headers.get("x-request-id")).toBeTruthy();
    const body = await res.text();
    expect(body.trimEnd().endsWith("data: [DONE]")).toBe(true);
  });

  it("lists the models a key may call", async () => {
    const { apiKey } = await signUp(system.url);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey });
    const ids = [];
    for await (const model of client.models.list()) ids.push(model.id);
    expect(ids).toContain("demo-small");
  });
});
