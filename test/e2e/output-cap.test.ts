import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { affordableOutputTokens } from "@mkt/runtime/money";
import { formatUsd } from "../../services/billing/src/wallets/ledger.ts";
import { postChat } from "./billing-db.ts";
import { DEMO_PRICES, signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

interface Completion {
  choices: Array<{ finish_reason: string }>;
  usage: { prompt_tokens: number; completion_tokens: number };
}
interface Usage {
  credit_balance_usd: number;
  usage_30d: { total_requests: number };
}

const CONTEXT_WINDOW = 8192; // demo-small's
const PLATFORM_CAP = 4096; // the output cap of platform models (PLATFORM_MAX_OUTPUT_TOKENS)

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem({
    // 0.01 USD pays the 4096-token cap once (≈ 6,150 micro-USD), then only part of it.
    billing: { STARTING_CREDIT_USD: "0.01" },
    // The demo model writes until the cap stops it, so the granted cap is what gets used.
    model: { DEMO_COMPLETION_TOKENS: "10000" },
  });
});
afterAll(async () => {
  await system?.close();
});

/** A non-streaming request without max_tokens or max_completion_tokens. */
async function uncapped(apiKey: string, content: string): Promise<Completion> {
  const res = await postChat(system.url, apiKey, { model: "demo-small", messages: [{ role: "user", content }] });
  expect(res.status).toBe(200);
  return (await res.json()) as Completion;
}

const balanceMicros = (usage: Usage) => BigInt(Math.round(usage.credit_balance_usd * 1e6));

describe("the output cap when the request sets none", () => {
  it("is the room left in the context when that is the smallest", async () => {
    const { apiKey } = await signUp(system.url);
    // About 5,000 prompt tokens leave ≈ 3,190 tokens of room: less than 4096, and affordable.
    const completion = await uncapped(apiKey, "tell ".repeat(5000));
    expect(completion.usage.prompt_tokens).toBeGreaterThan(CONTEXT_WINDOW - PLATFORM_CAP);
    expect(completion.usage.completion_tokens).toBe(CONTEXT_WINDOW - completion.usage.prompt_tokens);
    expect(completion.choices[0]!.finish_reason).toBe("length");
  });

  it("is the model's cap, then what the balance pays, then 402 stating balance and amount needed", async () => {
    const { apiKey } = await signUp(system.url);
    const first = await uncapped(apiKey, "Write as much as you can.");
    expect(first.usage.completion_tokens).toBe(PLATFORM_CAP);

    const afterFirst = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 1);
    const second = await uncapped(apiKey, "And more.");
    const affordable = affordableOutputTokens(
      balanceMicros(afterFirst),
      BigInt(second.usage.prompt_tokens),
      DEMO_PRICES.input,
      DEMO_PRICES.output,
    );
    expect(affordable).toBeLessThan(BigInt(PLATFORM_CAP));
    expect(BigInt(second.usage.completion_tokens)).toBe(affordable);

    // What is left cannot pay the prompt plus a single output token.
    const afterSecond = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 2);
    expect(balanceMicros(afterSecond)).toBeGreaterThanOrEqual(0n);
    const res = await postChat(system.url, apiKey, {
      model: "demo-small",
      messages: [{ role: "user", content: "One more word?" }],
    });
    expect(res.status).toBe(402);
    const { error } = (await res.json()) as { error: { type: string; code: string; message: string } };
    expect(error).toMatchObject({ type: "insufficient_quota", code: "insufficient_credits" });
    expect(error.message).toContain(
      `your balance is ${formatUsd(balanceMicros(afterSecond))} and this request needs $`,
    );
    expect(error.message).toMatch(/needs \$0\.0000\d+ \(prompt plus at least one output token\)\.$/);
  });
});

describe("an output field above the output cap: lowered on every API, never refused", () => {
  it("chat: max_tokens and max_completion_tokens of 32,000 are served 4096 tokens, finish_reason length", async () => {
    for (const field of ["max_tokens", "max_completion_tokens"]) {
      const { apiKey } = await signUp(system.url);
      const res = await postChat(system.url, apiKey, {
        model: "demo-small",
        messages: [{ role: "user", content: "Write as much as you can." }],
        [field]: 32_000,
      });
      const completion = (await res.json()) as Completion;
      expect(res.status, JSON.stringify(completion)).toBe(200);
      expect(completion.usage.completion_tokens).toBe(PLATFORM_CAP);
      expect(completion.choices[0]!.finish_reason).toBe("length");
    }
  });

  it("chat: lowered to the room the prompt leaves in the context", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await postChat(system.url, apiKey, {
      model: "demo-small",
      messages: [{ role: "user", content: "tell ".repeat(5000) }],
      max_tokens: 32_000,
    });
    const completion = (await res.json()) as Completion;
    expect(res.status, JSON.stringify(completion)).toBe(200);
    expect(completion.usage.completion_tokens).toBe(CONTEXT_WINDOW - completion.usage.prompt_tokens);
    expect(completion.choices[0]!.finish_reason).toBe("length");
  });

  it("chat: then to what the balance pays, as without the field", async () => {
    const { apiKey } = await signUp(system.url);
    const ask = (content: string) =>
      postChat(system.url, apiKey, { model: "demo-small", messages: [{ role: "user", content }], max_tokens: 32_000 });
    const first = (await (await ask("Write as much as you can.")).json()) as Completion;
    expect(first.usage.completion_tokens).toBe(PLATFORM_CAP);
    const afterFirst = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 1);
    const res = await ask("And more.");
    const second = (await res.json()) as Completion;
    expect(res.status, JSON.stringify(second)).toBe(200);
    const affordable = affordableOutputTokens(
      balanceMicros(afterFirst),
      BigInt(second.usage.prompt_tokens),
      DEMO_PRICES.input,
      DEMO_PRICES.output,
    );
    expect(affordable).toBeLessThan(BigInt(PLATFORM_CAP));
    expect(BigInt(second.usage.completion_tokens)).toBe(affordable);
  });

  it("Messages: Claude Code's max_tokens of 64,000 is served 4096 tokens, stop_reason max_tokens", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "demo-small",
        max_tokens: 64_000,
        messages: [{ role: "user", content: "Write as much as you can." }],
      }),
    });
    const message = (await res.json()) as Record<string, unknown>;
    expect(res.status, JSON.stringify(message)).toBe(200);
    expect(message).toMatchObject({ stop_reason: "max_tokens", usage: { output_tokens: PLATFORM_CAP } });
  });

  it("Responses: max_output_tokens of 32,000 is served 4096 tokens, status incomplete", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "demo-small", max_output_tokens: 32_000, input: "Write as much as you can." }),
    });
    const response = (await res.json()) as Record<string, unknown>;
    expect(res.status, JSON.stringify(response)).toBe(200);
    expect(response).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      usage: { output_tokens: PLATFORM_CAP },
    });
  });
});
