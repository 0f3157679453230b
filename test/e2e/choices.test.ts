import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { DEMO_PRICES, signUp, startSystem, type RunningSystem } from "./system.ts";

// `n` with the official `openai` SDK through the whole system and the demo model: the choices
// asked for come back, streamed and not, and are billed together; above the model's `max_n`
// (8 for the default demo model) the request is refused, never answered with fewer.

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let system: RunningSystem;
let apiKey: string;
let client: OpenAI;
beforeAll(async () => {
  system = await startSystem();
  ({ apiKey } = await signUp(system.url));
  client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey, maxRetries: 0 });
});
afterAll(async () => {
  await system?.close();
});

/** Polls until the request has settled and returns its generation record. */
async function settledGeneration(id: string): Promise<Json> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const res = await fetch(`${system.url}/v1/generations/${id}`, { headers: { authorization: `Bearer ${apiKey}` } });
    if (res.status === 200) return (await res.json()) as Json;
    expect(res.status).toBe(404);
    if (Date.now() > deadline) throw new Error(`${id} never settled`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("n choices", () => {
  it("n: 2 answers two different choices, and the usage and the bill count both", async () => {
    const completion = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "Give me two answers." }],
      n: 2,
      max_tokens: 40,
    });
    expect(completion.choices.map((c) => c.index)).toEqual([0, 1]);
    const [a, b] = completion.choices.map((c) => c.message.content ?? "");
    expect(a).not.toBe("");
    expect(b).not.toBe("");
    expect(a).not.toBe(b);

    // One choice alone is the first of the two: the output of two is billed, not of one.
    const single = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "Give me two answers." }],
      max_tokens: 40,
    });
    expect(single.choices).toHaveLength(1);
    expect(single.choices[0]!.message.content).toBe(a);
    expect(completion.usage!.completion_tokens).toBeGreaterThan(single.usage!.completion_tokens);

    const generation = await settledGeneration(completion.id);
    expect(generation).toMatchObject({
      input_tokens: completion.usage!.prompt_tokens,
      output_tokens: completion.usage!.completion_tokens,
      status: "success",
    });
    const expected = costMicros(
      BigInt(completion.usage!.prompt_tokens),
      BigInt(completion.usage!.completion_tokens),
      DEMO_PRICES.input,
      DEMO_PRICES.output,
    );
    expect(Math.round(generation.cost_usd * 1e6)).toBe(Number(expected));
  });

  it("streamed, n: 2 sends both choices to their end", async () => {
    const stream = await client.chat.completions.create({
      model: "demo-small",
      messages: [{ role: "user", content: "Stream two answers." }],
      n: 2,
      max_tokens: 24,
      stream: true,
      stream_options: { include_usage: true },
    });
    const text = ["", ""];
    const finish: Array<string | null> = [null, null];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        text[choice.index] += choice.delta.content ?? "";
        finish[choice.index] ??= choice.finish_reason;
      }
      usage ??= chunk.usage ?? undefined;
    }
    expect(text.every((t) => t.length > 0)).toBe(true);
    expect(text[0]).not.toBe(text[1]);
    expect(finish.every((f) => f === "stop" || f === "length")).toBe(true);
    expect(usage!.completion_tokens).toBeGreaterThan(0);
  });

  it("n above the model's max_n is a 400 naming n, in OpenAI's error shape", async () => {
    const err = await client.chat.completions
      .create({ model: "demo-small", messages: [{ role: "user", content: "Nine answers." }], n: 9 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const bad = err as InstanceType<typeof OpenAI.BadRequestError>;
    expect(bad.status).toBe(400);
    expect(bad.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request", param: "n" });
    expect(bad.message).toContain("at most 8");
  });
});
