import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// Hostile inputs (docs/adr/0005-openai-error-shape.md), each a 400 with the OpenAI error shape
// (never a 500), and the odd-but-valid inputs that must still be answered.

let system: RunningSystem;
let apiKey: string;

beforeAll(async () => {
  system = await startSystem({
    registry: {
      // A context large enough that a 1 MB message fits: it must be answered, not refused.
      LOCAL_MODELS: JSON.stringify([
        {
          model_id: "demo-large",
          context_window: 1_000_000,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
          upstream_model: "demo-small",
        },
      ]),
    },
  });
  ({ apiKey } = await signUp(system.url));
});
afterAll(async () => {
  await system?.close();
});

/** POSTs raw JSON text (so 2^63−1 arrives exactly as written). */
async function post(path: string, body: string, auth = true) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (auth) headers.authorization = `Bearer ${apiKey}`;
  const res = await fetch(`${system.url}${path}`, { method: "POST", headers, body });
  return { status: res.status, body: (await res.json()) as { error?: Record<string, unknown> } };
}

const chatText = (extra: string) =>
  `{"model":"demo-large","messages":[{"role":"user","content":"hi"}],"max_tokens":2${extra}}`;

const invalid = (param: string) => ({
  status: 400,
  body: { error: { message: expect.any(String), type: "invalid_request_error", param, code: "invalid_request" } },
});

describe("hostile values: 400 with the OpenAI error shape", () => {
  it.each(["max_tokens", "max_completion_tokens"])("%s of 2^63−1 or 1e300", async (field) => {
    for (const value of ["9223372036854775807", "1e300"]) {
      const body = `{"model":"demo-large","messages":[{"role":"user","content":"hi"}],"${field}":${value}}`;
      expect(await post("/v1/chat/completions", body)).toEqual(invalid(field));
    }
  });

  it.each(["/auth/login", "/hosters/login", "/v1/accounts"])("a NUL in the e-mail of %s", async (path) => {
    for (const email of ["\u0000", "ada\u0000@example.com"]) {
      const res = await post(path, JSON.stringify({ email, password: "correct horse battery staple" }), false);
      expect(res).toEqual(invalid("email"));
    }
  });

  it("an unknown field nested 5,000 arrays deep, and a body nested 500,000 deep", async () => {
    const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
    expect(await post("/v1/chat/completions", chatText(`,"unknown":${deep(5_000)}`))).toEqual(invalid("body"));
    expect(await post("/v1/keys", `{"name":"k","unknown":${deep(5_000)}}`)).toEqual(invalid("body"));
    expect(await post("/v1/chat/completions", deep(500_000))).toEqual(invalid("body"));
  });

  it("audio output is refused (no audio price exists)", async () => {
    expect(await post("/v1/chat/completions", chatText(`,"modalities":["text","audio"]`))).toEqual(
      invalid("modalities"),
    );
    expect(await post("/v1/chat/completions", chatText(`,"audio":{"voice":"alloy","format":"wav"}`))).toEqual(
      invalid("audio"),
    );
    // Text only is what every request already gets.
    expect((await post("/v1/chat/completions", chatText(`,"modalities":["text"]`))).status).toBe(200);
  });
});

describe("odd but valid input is answered", () => {
  it("a 1 MB chat message, a NUL and a lone surrogate inside chat text", async () => {
    const big = "lorem ipsum dolor sit amet ".repeat(40_000); // ~1 MB
    for (const content of [big, "before\u0000after", "half a pair: \ud800 ok"]) {
      const body = JSON.stringify({ model: "demo-large", messages: [{ role: "user", content }], max_tokens: 2 });
      const res = await post("/v1/chat/completions", body);
      expect(res.status).toBe(200);
    }
  });
});
