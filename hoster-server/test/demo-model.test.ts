import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countPromptTokens, countTextTokens } from "@mkt/runtime/tokens";
import type { HosterServerHandle } from "../src/server.ts";
import { parseStream, post, startServer, startWatchedServer, waitFor } from "./harness.ts";

const TOKEN = "test-token";
const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Tell me about deterministic demo models." },
];

interface Completion {
  object: string;
  model: string;
  choices: Array<{ message: { role: string; content: string }; finish_reason: string }>;
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

let server: HosterServerHandle;
beforeAll(async () => {
  server = await startServer({ DEMO_MODELS: "demo-small, demo-large" });
});
afterAll(async () => {
  await server?.close();
});

async function complete(body: object): Promise<Completion> {
  const res = await post(server.url, TOKEN, { model: "demo-small", messages, ...body });
  expect(res.status).toBe(200);
  return (await res.json()) as Completion;
}

async function stream(body: object) {
  const res = await post(server.url, TOKEN, { model: "demo-small", messages, stream: true, ...body });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  return parseStream(await res.text());
}

describe("access", () => {
  it("answers /health without a token", async () => {
    const res = await fetch(`${server.url}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("refuses /v1 calls without the bearer token or with a wrong one", async () => {
    const cases: Array<Promise<Response>> = [
      fetch(`${server.url}/v1/models`),
      fetch(`${server.url}/v1/models`, { headers: { authorization: "Bearer wrong" } }),
      fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${TOKEN}x` } }),
      fetch(`${server.url}/v1/models`, { headers: { authorization: TOKEN } }),
      post(server.url, undefined, { model: "demo-small", messages }),
      post(server.url, "wrong", { model: "demo-small", messages }),
    ];
    for (const res of await Promise.all(cases)) {
      expect(res.status).toBe(401);
      const body = (await res.json()) as { error: Record<string, unknown> };
      expect(body.error).toMatchObject({ type: "authentication_error", code: "invalid_api_key", param: null });
      expect(JSON.stringify(body)).not.toContain(TOKEN);
    }
  });

  it("lists the demo models", async () => {
    const res = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; data: Array<Record<string, unknown>> };
    expect(body.object).toBe("list");
    expect(body.data.map((m) => m.id)).toEqual(["demo-small", "demo-large"]);
    for (const model of body.data) {
      expect(model).toMatchObject({ object: "model", owned_by: "hoster-server" });
      expect(typeof model.created).toBe("number");
    }
  });
});

describe("bad requests", () => {
  it("answers an unknown model with 404 model_not_found", async () => {
    const res = await post(server.url, TOKEN, { model: "gpt-nothing", messages });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      error: {
        message: "The model 'gpt-nothing' does not exist.",
        type: "invalid_request_error",
        param: "model",
        code: "model_not_found",
      },
    });
  });

  it.each([
    ["malformed JSON", '{"model": "demo-small",', "body"],
    ["no messages", { model: "demo-small" }, "messages"],
    ["empty messages", { model: "demo-small", messages: [] }, "messages"],
    ["message without role", { model: "demo-small", messages: [{ content: "x" }] }, "messages[0].role"],
    ["no model", { messages }, "model"],
    ["max_tokens not a number", { model: "demo-small", messages, max_tokens: "10" }, "max_tokens"],
    ["max_tokens zero", { model: "demo-small", messages, max_tokens: 0 }, "max_tokens"],
    ["stream not boolean", { model: "demo-small", messages, stream: "yes" }, "stream"],
    ["body is an array", [1, 2], "body"],
  ])("answers %s with 400 invalid_request", async (_name, body, param) => {
    const res = await post(server.url, TOKEN, body);
    expect(res.status).toBe(400);
    const json = (await res.json()) as { error: Record<string, unknown> };
    expect(json.error).toMatchObject({ type: "invalid_request_error", code: "invalid_request", param });
    expect(typeof json.error.message).toBe("string");
  });
});

describe("demo model", () => {
  it("answers deterministically, with usage counted the gateway's way", async () => {
    const a = await complete({});
    const b = await complete({});
    expect(a.object).toBe("chat.completion");
    expect(a.model).toBe("demo-small");
    expect(a.choices[0]!.message.role).toBe("assistant");
    expect(a.choices[0]!.message.content).toBe(b.choices[0]!.message.content);
    expect(a.choices[0]!.finish_reason).toBe("stop");
    const text = a.choices[0]!.message.content;
    // The second asking finds the system message in the prefix cache (the last message never is).
    expect(b.usage).toEqual({
      prompt_tokens: countPromptTokens(messages),
      completion_tokens: countTextTokens(text),
      total_tokens: countPromptTokens(messages) + countTextTokens(text),
      prompt_tokens_details: { cached_tokens: countPromptTokens(messages.slice(0, 1)) },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    expect(a.usage.completion_tokens).toBe(24); // DEMO_COMPLETION_TOKENS default

    const other = await post(server.url, TOKEN, { model: "demo-small", messages: [{ role: "user", content: "Hi" }] });
    const otherText = ((await other.json()) as Completion).choices[0]!.message.content;
    expect(otherText).not.toBe(text);
  });

  it("streams the same answer word by word, then finish_reason, then [DONE]", async () => {
    const full = (await complete({})).choices[0]!.message.content;
    const { chunks, content, done } = await stream({});
    expect(done).toBe(true);
    expect(content).toBe(full);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    const words = chunks.slice(1, -1);
    expect(words.length).toBe(full.split(" ").length);
    for (const chunk of words) expect(chunk.choices[0]!.finish_reason).toBeNull();
    expect(chunks.at(-1)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "stop" });
    // No usage chunk unless asked for.
    expect(chunks.every((c) => c.usage === undefined && c.choices.length === 1)).toBe(true);
  });

  it("sends a usage chunk with choices [] only when stream_options.include_usage is set", async () => {
    await complete({}); // so the system message is in the prefix cache whichever test ran before
    const { chunks, content, done } = await stream({ stream_options: { include_usage: true } });
    expect(done).toBe(true);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({
      prompt_tokens: countPromptTokens(messages),
      completion_tokens: countTextTokens(content),
      total_tokens: countPromptTokens(messages) + countTextTokens(content),
      prompt_tokens_details: { cached_tokens: countPromptTokens(messages.slice(0, 1)) },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe("stop");
    expect(chunks.filter((c) => c.usage !== undefined)).toHaveLength(1);

    const off = await stream({ stream_options: { include_usage: false } });
    expect(off.chunks.some((c) => c.usage !== undefined)).toBe(false);
  });

  it("respects max_tokens and max_completion_tokens with finish_reason length", async () => {
    const full = (await complete({})).choices[0]!.message.content;
    for (const cap of [
      { max_tokens: 5 },
      { max_completion_tokens: 5 },
      { max_tokens: 100, max_completion_tokens: 5 },
    ]) {
      const cut = await complete(cap);
      const text = cut.choices[0]!.message.content;
      expect(cut.choices[0]!.finish_reason).toBe("length");
      expect(cut.usage.completion_tokens).toBe(countTextTokens(text));
      expect(cut.usage.completion_tokens).toBeLessThanOrEqual(5);
      expect(cut.usage.completion_tokens).toBeGreaterThan(0);
      expect(full.startsWith(text)).toBe(true);
    }
    const streamed = await stream({ max_tokens: 3, stream_options: { include_usage: true } });
    expect(countTextTokens(streamed.content)).toBeLessThanOrEqual(3);
    expect(streamed.chunks.at(-2)!.choices[0]!.finish_reason).toBe("length");
    expect(streamed.chunks.at(-1)!.usage!.completion_tokens).toBe(countTextTokens(streamed.content));
    // A cap above the answer's length changes nothing.
    const roomy = await complete({ max_tokens: 1000 });
    expect(roomy.choices[0]!.finish_reason).toBe("stop");
    expect(roomy.choices[0]!.message.content).toBe(full);
  });

  it("works with the official openai SDK, streamed and not", async () => {
    const client = new OpenAI({ apiKey: TOKEN, baseURL: `${server.url}/v1` });
    const plain = await client.chat.completions.create({
      model: "demo-large",
      messages: [{ role: "user", content: "SDK" }],
    });
    const chunks = await client.chat.completions.create({
      model: "demo-large",
      messages: [{ role: "user", content: "SDK" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of chunks) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(plain.choices[0]!.message.content);
    expect(usage).toMatchObject(plain.usage!);
    await expect(
      new OpenAI({ apiKey: "wrong", baseURL: `${server.url}/v1`, maxRetries: 0 }).models.list(),
    ).rejects.toMatchObject({ status: 401 });
  });
});

describe("pacing and disconnects", () => {
  it("paces tokens at DEMO_TOKENS_PER_SECOND", async () => {
    const paced = await startServer({ DEMO_TOKENS_PER_SECOND: "50", DEMO_COMPLETION_TOKENS: "10" });
    try {
      // 10 tokens at 50 tokens/s is 200 ms of generation; assert a lower bound only.
      let started = performance.now();
      const res = await post(paced.url, TOKEN, { model: "demo-small", messages, stream: true });
      const { content } = parseStream(await res.text());
      expect(countTextTokens(content)).toBe(10);
      expect(performance.now() - started).toBeGreaterThanOrEqual(150);

      started = performance.now();
      const plain = await post(paced.url, TOKEN, { model: "demo-small", messages });
      expect(plain.status).toBe(200);
      await plain.json();
      expect(performance.now() - started).toBeGreaterThanOrEqual(150);
    } finally {
      await paced.close();
    }
  });

  it("stops generating when the client disconnects", async () => {
    // 400 tokens at 20/s would take 20 s; the client leaves after the first word.
    const slow = await startWatchedServer({ DEMO_TOKENS_PER_SECOND: "20", DEMO_COMPLETION_TOKENS: "400" });
    try {
      const abort = new AbortController();
      const res = await post(slow.url, TOKEN, { model: "demo-small", messages, stream: true }, abort.signal);
      const reader = res.body!.getReader();
      const first = await reader.read();
      expect(new TextDecoder().decode(first.value)).toContain('"role":"assistant"');
      const leftAt = Date.now();
      abort.abort();
      await waitFor(() => slow.ended.length === 1);
      expect(slow.ended[0]!.finished).toBe(false);
      expect(slow.ended[0]!.at - leftAt).toBeLessThan(1_000);
    } finally {
      await slow.app.close();
    }
  });

  it("finishes running answers without pacing when shut down", async () => {
    const slow = await startServer({ DEMO_TOKENS_PER_SECOND: "20", DEMO_COMPLETION_TOKENS: "400" });
    const res = await post(slow.url, TOKEN, { model: "demo-small", messages, stream: true });
    const body = res.text();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const started = Date.now();
    await slow.close();
    expect(Date.now() - started).toBeLessThan(2_000);
    const { content, done } = parseStream(await body);
    expect(done).toBe(true);
    expect(countTextTokens(content)).toBe(400);
  });
});

describe("n choices", () => {
  it("answers n distinct, deterministic choices; choice 0 is the answer without n; usage counts them all", async () => {
    const single = await complete({});
    const first = await complete({ n: 3 });
    const again = await complete({ n: 3 });
    expect(first.choices.map((c) => (c as { index?: number }).index)).toEqual([0, 1, 2]);
    expect(first.choices.map((c) => c.message.content)).toEqual(again.choices.map((c) => c.message.content));
    expect(first.choices[0]!.message.content).toBe(single.choices[0]!.message.content);
    expect(new Set(first.choices.map((c) => c.message.content)).size).toBe(3);
    const output = first.choices.reduce((sum, c) => sum + countTextTokens(c.message.content), 0);
    expect(first.usage.completion_tokens).toBe(output);
  });

  it("streams every choice, each ending with its finish_reason, the same texts as unstreamed", async () => {
    const whole = await complete({ n: 2 });
    const { chunks } = await stream({ n: 2, stream_options: { include_usage: true } });
    const text = ["", ""];
    const finished: Array<string | null> = [null, null];
    for (const chunk of chunks) {
      for (const choice of chunk.choices as Array<{
        index: number;
        delta: { content?: string };
        finish_reason: string | null;
      }>) {
        text[choice.index] += choice.delta.content ?? "";
        if (choice.finish_reason) finished[choice.index] = choice.finish_reason;
      }
    }
    expect(text).toEqual(whole.choices.map((c) => c.message.content));
    expect(finished).toEqual(whole.choices.map((c) => c.finish_reason));
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(whole.usage.completion_tokens);
  });
});
