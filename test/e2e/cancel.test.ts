import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, waitForUsage, type RunningSystem } from "./system.ts";

interface Usage {
  usage_30d: { total_requests: number; total_output_tokens: number; total_cost_microdollars: number };
}

// A 1000-token demo answer at 20 tokens a second, capped at 200: finishing would take 10 s.
const TOKENS_PER_SECOND = 20;
const MAX_TOKENS = 200;

let system: RunningSystem;
beforeAll(async () => {
  system = await startSystem({
    model: { DEMO_TOKENS_PER_SECOND: String(TOKENS_PER_SECOND), DEMO_COMPLETION_TOKENS: "1000" },
  });
});
afterAll(async () => {
  await system?.close();
});

describe("a client that goes away mid-stream", () => {
  it("cancels the call down to the upstream and is billed only for what it received", async () => {
    const { apiKey } = await signUp(system.url);
    const abort = new AbortController();
    const res = await fetch(`${system.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "auto",
        max_tokens: MAX_TOKENS,
        stream: true,
        messages: [{ role: "user", content: "Tell me a long story." }],
      }),
      signal: abort.signal,
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let received = "";
    while ((received.match(/"content":"[^"]+"/g) ?? []).length < 3) {
      const { value, done } = await reader.read();
      if (done) throw new Error("stream ended before three content chunks");
      received += new TextDecoder().decode(value);
    }
    const abortedAt = Date.now();
    abort.abort();

    // The registry records the request once its upstream call is torn down: long before the
    // 10 s the full answer would take, had the cancellation not reached the upstream.
    const usage = await waitForUsage<Usage>(system.url, apiKey, (u) => u.usage_30d.total_requests === 1, 5_000);
    expect(Date.now() - abortedAt).toBeLessThan(5_000);
    expect(usage.usage_30d.total_output_tokens).toBeGreaterThanOrEqual(3);
    expect(usage.usage_30d.total_output_tokens).toBeLessThan(MAX_TOKENS / 2);
    expect(usage.usage_30d.total_cost_microdollars).toBeGreaterThan(0);
  });
});
