import { OpenAIEmbeddings } from "@langchain/openai";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { costMicros } from "@mkt/runtime/money";
import { countTextTokens } from "@mkt/runtime/tokens";
import { demoEmbedding } from "../../hoster-server/src/demo/demo-embeddings.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// POST /v1/embeddings through the whole system with the official `openai` SDK, LangChain's
// OpenAIEmbeddings and plain fetch, against the demo model's `demo-embed` (registry's default
// catalog, kind `embedding`): its vectors are recomputed here from the demo's documented rule.

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** demo-embed's input price in the default catalog: USD 0.10 per 1M tokens. */
const EMBED_INPUT_PRICE = 100_000n;
const MODEL = "demo-embed";

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

const expected = (text: string, dimensions?: number) => Array.from(demoEmbedding(text, dimensions));

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

const post = (body: unknown) =>
  fetch(`${system.url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
  });

describe("embeddings with the openai SDK", () => {
  it("one input: the SDK's default base64 decodes to the demo's unit vector, billed input × input price", async () => {
    const text = "The quick brown fox";
    const { data: answer, response } = await client.embeddings.create({ model: MODEL, input: text }).withResponse();
    expect(answer.object).toBe("list");
    expect(answer.model).toBe(MODEL);
    expect(answer.data).toHaveLength(1);
    expect(answer.data[0]!.index).toBe(0);
    expect(answer.data[0]!.embedding).toEqual(expected(text));
    expect(Math.hypot(...answer.data[0]!.embedding)).toBeCloseTo(1, 5);
    const tokens = countTextTokens(text);
    expect(answer.usage).toMatchObject({ prompt_tokens: tokens, total_tokens: tokens });

    const requestId = response.headers.get("x-request-id")!;
    const generation = await settledGeneration(requestId);
    expect(generation).toMatchObject({
      model: MODEL,
      provider: "local",
      input_tokens: tokens,
      output_tokens: 0,
      total_tokens: tokens,
      status: "success",
    });
    const cost = costMicros(BigInt(tokens), 0n, EMBED_INPUT_PRICE, 0n);
    expect(Math.round(generation.cost_usd * 1e6)).toBe(Number(cost));
    expect((answer.usage as unknown as Json).cost).toBe(generation.cost_usd);
  });

  it("a batch: one vector per input, in order, float encoding too, and `dimensions` passed on", async () => {
    const input = ["alpha", "beta gamma", "δέλτα 東京 🚀"];
    const base64 = await client.embeddings.create({ model: MODEL, input });
    expect(base64.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(base64.data.map((d) => d.embedding)).toEqual(input.map((t) => expected(t)));
    expect(base64.usage.prompt_tokens).toBe(input.reduce((sum, t) => sum + countTextTokens(t), 0));

    const floats = await client.embeddings.create({ model: MODEL, input, encoding_format: "float", dimensions: 8 });
    expect(floats.data.map((d) => d.embedding)).toEqual(input.map((t) => expected(t, 8)));
  });

  it("LangChain's OpenAIEmbeddings embeds a query and documents", async () => {
    const embeddings = new OpenAIEmbeddings({
      model: MODEL,
      apiKey,
      configuration: { baseURL: `${system.url}/v1` },
      maxRetries: 0,
    });
    expect(await embeddings.embedQuery("hello world")).toEqual(expected("hello world"));
    expect(await embeddings.embedDocuments(["one", "two"])).toEqual([expected("one"), expected("two")]);
  });
});

describe("what embeddings refuse", () => {
  it("a chat model asked for embeddings is 404 model_not_found", async () => {
    const err = await client.embeddings.create({ model: "demo-small", input: "x" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({
      type: "invalid_request_error",
      code: "model_not_found",
      param: "model",
    });
  });

  it("an embedding model asked for a chat is 404 model_not_found, and `auto` never picks it", async () => {
    const err = await client.chat.completions
      .create({ model: MODEL, messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({ code: "model_not_found" });
    const auto = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "hi" }] });
    expect(auto.model).not.toBe(MODEL);
  });

  it("token arrays, empty input and a bad encoding are 400s naming the field", async () => {
    const cases: Array<[unknown, string]> = [
      [{ model: MODEL, input: [1, 2, 3] }, "input"],
      [{ model: MODEL, input: [[1, 2]] }, "input"],
      [{ model: MODEL, input: [] }, "input"],
      [{ model: MODEL, input: ["ok", ""] }, "input[1]"],
      [{ model: MODEL, input: "x", encoding_format: "int8" }, "encoding_format"],
      [{ input: "x" }, "model"],
    ];
    for (const [body, param] of cases) {
      const res = await post(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const { error } = (await res.json()) as { error: Json };
      expect(error).toMatchObject({ type: "invalid_request_error", param });
    }
  });

  it("lists demo-embed with kind embedding in /v1/models", async () => {
    const models = await client.models.list();
    const kinds = Object.fromEntries(models.data.map((m) => [m.id, (m as unknown as Json).kind]));
    expect(kinds).toMatchObject({ "demo-small": "chat", "demo-embed": "embedding" });
  });
});

describe("usage reports", () => {
  it("an embeddings request appears in the CSV export like any request", async () => {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const res = await fetch(`${system.url}/v1/usage/export?days=1`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      const rows = (await res.text())
        .trimEnd()
        .split("\n")
        .slice(1)
        .map((line) => line.split(","));
      const embedRows = rows.filter((row) => row[1] === MODEL);
      if (embedRows.length >= 3) {
        for (const row of embedRows) {
          expect(row[2]).toBe("local");
          expect(Number(row[4])).toBe(0);
          expect(row[8]).toBe("true");
        }
        return;
      }
      if (Date.now() > deadline) throw new Error(`embeddings never in the export: ${JSON.stringify(rows)}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });
});
