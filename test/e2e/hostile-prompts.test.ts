import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// A model with a context large enough that a 14 MB prompt passes the length bound and is
// tokenized: the path that once pinned a worker for minutes (docs/adr/0024-bounded-prompt-work.md).
const LOCAL_MODELS = JSON.stringify([
  {
    model_id: "demo-small",
    model_alias: "Demo Small",
    context_window: 200_000,
    input_price_per_1m_usd: "0.50",
    output_price_per_1m_usd: "1.50",
  },
]);
const BODY_LIMIT = 16 * 1024 * 1024;

let system: RunningSystem;
let attacker: string;
let victim: string;
beforeAll(async () => {
  system = await startSystem({ registry: { LOCAL_MODELS }, edge: { BODY_LIMIT_BYTES: String(BODY_LIMIT) } });
  [{ apiKey: attacker }, { apiKey: victim }] = await Promise.all([signUp(system.url), signUp(system.url)]);
});
afterAll(async () => {
  await system?.close();
});

async function chat(key: string, body: string) {
  const res = await fetch(`${system.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body,
  });
  return { status: res.status, body: (await res.json()) as { error?: Record<string, unknown> } };
}

const longRun = (chars: number) =>
  JSON.stringify({ model: "auto", messages: [{ role: "user", content: "QUJD".repeat(chars / 4) }] });

describe("one tenant's huge prompts do not stall another's", () => {
  it("refuses three 14 MB prompts while another customer's small request answers", async () => {
    const attack = Array.from({ length: 3 }, () => chat(attacker, longRun(14_000_000)));
    // Sent once the attack is on its way: its bodies are being received and counted meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const small = await chat(victim, JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }] }));
    expect(small.status).toBe(200);
    for (const refused of await Promise.all(attack)) {
      expect(refused.status).toBe(400);
      expect(refused.body.error).toMatchObject({
        type: "invalid_request_error",
        code: "context_length_exceeded",
        param: "messages",
      });
    }
  });

  it("answers a body over the limit with 413 request_too_large", async () => {
    const refused = await chat(attacker, longRun(BODY_LIMIT + 4));
    expect(refused.status).toBe(413);
    expect(refused.body.error).toMatchObject({
      type: "invalid_request_error",
      code: "request_too_large",
      message: `The request body is larger than the ${BODY_LIMIT}-byte limit.`,
    });
  });
});
