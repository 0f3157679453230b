import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { answerText, startWordCountingHoster } from "../../services/registry/test/fixtures/word-counting-hoster.ts";
import type { WordCountingHoster } from "../../services/registry/test/fixtures/word-counting-hoster.ts";
import { registerHoster, type RegisteredHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";
import { apiCall, type Json } from "./api-call.ts";

/**
 * The runaway guard (docs/adr/0022-runaway-guard-not-a-cap.md) as a new user meets it: a hoster
 * whose model counts one token per word (so its count is far below the gateway's), a customer who
 * subscribes and chats with the scoped key, `auto` and the model's name, streamed and not. The
 * hoster judges max_tokens; every answer arrives whole, with the hoster's own finish_reason, billed
 * by its own count, and the hoster is not flagged.
 */

let system: RunningSystem;
let hoster: RegisteredHoster;
let words: WordCountingHoster;
let scopedKey: string;
let customerKey: string;

const call = (method: string, path: string, auth: { cookie?: string; key?: string }, body?: unknown) =>
  apiCall(system.url, method, path, { ...auth, body });

beforeAll(async () => {
  system = await startSystem();
  hoster = await registerHoster(system, {
    name: "Word Hoster",
    modelId: "wordy-7b",
    startServer: async (modelId) => (words = await startWordCountingHoster({ models: [modelId], answerWords: 6 })),
  });
  const plan = await call(
    "POST",
    "/hosters/products",
    { cookie: hoster.cookie },
    { name: "Pay as you go", pricing_model: "payg", input_price_per_1m_usd: 2, output_price_per_1m_usd: 6 },
  );
  expect(plan.status, JSON.stringify(plan.body)).toBe(201);
  customerKey = (await signUp(system.url)).apiKey;
  const subscription = await call(
    "POST",
    "/v1/subscriptions",
    { key: customerKey },
    { product_id: plan.body.product_id },
  );
  expect(subscription.status, JSON.stringify(subscription.body)).toBe(201);
  scopedKey = subscription.body.api_key as string;
});
afterAll(async () => {
  await system?.close();
  await hoster?.server.close();
});

const CASES = [
  // Six words fill max_tokens 6 by the hoster's count: it stops on its own ("stop").
  { maxTokens: 6, words: 6, finish: "stop" },
  // max_tokens 4 ends its six-word answer at four words: the hoster's own "length".
  { maxTokens: 4, words: 4, finish: "length" },
];

describe("a scoped key on a hoster that counts one token per word", () => {
  const sdk = () => new OpenAI({ baseURL: `${system.url}/v1`, apiKey: scopedKey, maxRetries: 0 });

  it.each(["auto", "wordy-7b"])("gets whole answers from model %s, not streamed", async (model) => {
    for (const c of CASES) {
      const completion = await sdk().chat.completions.create({
        model,
        max_tokens: c.maxTokens,
        messages: [{ role: "user", content: "Answer in six words." }],
      });
      expect(completion.model).toBe(hoster.modelId);
      const text = completion.choices[0]!.message.content!;
      // By the gateway's count the answer is far past max_tokens: a cut at the cap lost its end.
      expect(countTextTokens(text)).toBeGreaterThan(2 * c.maxTokens);
      expect(text).toBe(answerText(c.words));
      expect(completion.choices[0]!.finish_reason).toBe(c.finish);
      expect(completion.usage).toMatchObject({ prompt_tokens: 4, completion_tokens: c.words });
      expect(words.calls.at(-1)!.body.max_tokens).toBe(c.maxTokens);
    }
  });

  it.each(["auto", "wordy-7b"])("gets whole answers from model %s, streamed", async (model) => {
    for (const c of CASES) {
      const stream = await sdk().chat.completions.create({
        model,
        max_tokens: c.maxTokens,
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: "user", content: "Answer in six words." }],
      });
      let text = "";
      const finishes: string[] = [];
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? "";
        if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason);
        if (chunk.usage) usage = chunk.usage;
      }
      expect(text).toBe(answerText(c.words));
      expect(finishes).toEqual([c.finish]);
      expect(usage).toMatchObject({ prompt_tokens: 4, completion_tokens: c.words });
    }
  });

  it("is billed by the hoster's own count and never flagged for counting below the gateway", async () => {
    // Eight answers of 6 and 4 words, four words of prompt each.
    const usage = await waitForUsage<Json>(system.url, customerKey, (u) => u.usage_30d.total_requests === 8);
    expect(usage.usage_30d).toMatchObject({ total_input_tokens: 32, total_output_tokens: 40 });
    // Mismatches are written every second: a flag would have landed by now.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const me = await call("GET", "/hosters/me", { cookie: hoster.cookie });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ hoster_id: hoster.hosterId, usage_mismatches: 0 });
  });
});
