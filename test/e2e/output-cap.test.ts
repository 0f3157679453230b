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
