import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { DEMO_EMBEDDING_DIMENSIONS, demoEmbedding, embeddingBase64 } from "../src/demo/demo-embeddings.ts";
import type { HosterServerHandle } from "../src/server.ts";
import { startServer } from "./harness.ts";

// The demo model's POST /v1/embeddings, called directly and through a proxy-mode server, with
// the openai SDK and plain fetch.

const TOKEN = "test-token";
let demo: HosterServerHandle;
let proxy: HosterServerHandle;
beforeAll(async () => {
  demo = await startServer({ DEMO_MODELS: "demo-embed" });
  proxy = await startServer({ HOSTER_SERVER_TOKEN: "proxy-token", UPSTREAM_URL: demo.url, UPSTREAM_API_KEY: TOKEN });
});
afterAll(async () => {
  await proxy?.close();
  await demo?.close();
});

const post = (url: string, token: string, body: unknown) =>
  fetch(`${url}/v1/embeddings`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });

describe("the demo's vectors", () => {
  it("are deterministic unit vectors of the asked length, different for different texts", () => {
    const a = demoEmbedding("alpha");
    expect(a).toHaveLength(DEMO_EMBEDDING_DIMENSIONS);
    expect(Math.hypot(...a)).toBeCloseTo(1, 6);
    expect(demoEmbedding("alpha")).toEqual(a);
    expect(demoEmbedding("beta")).not.toEqual(a);
    expect(demoEmbedding("alpha", 300)).toHaveLength(300);
    expect(Math.hypot(...demoEmbedding("alpha", 300))).toBeCloseTo(1, 6);
  });
});

describe("POST /v1/embeddings", () => {
  it("answers float and base64 that decode to the same vectors, usage counted as the gateway counts", async () => {
    const client = new OpenAI({ baseURL: `${demo.url}/v1`, apiKey: TOKEN, maxRetries: 0 });
    const input = ["one", "two three"];
    const floats = await client.embeddings.create({ model: "demo-embed", input, encoding_format: "float" });
    const decoded = await client.embeddings.create({ model: "demo-embed", input });
    expect(floats.data.map((d) => d.embedding)).toEqual(input.map((t) => Array.from(demoEmbedding(t))));
    expect(decoded.data.map((d) => d.embedding)).toEqual(floats.data.map((d) => d.embedding));
    const tokens = countTextTokens("one") + countTextTokens("two three");
    expect(floats.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });

    const raw = (await (
      await post(demo.url, TOKEN, { model: "demo-embed", input: "one", encoding_format: "base64" })
    ).json()) as {
      data: Array<{ embedding: string }>;
    };
    expect(raw.data[0]!.embedding).toBe(embeddingBase64(demoEmbedding("one")));
  });

  it("refuses token arrays, bad encodings and unknown models, naming the field", async () => {
    const cases: Array<[unknown, number, string]> = [
      [{ model: "demo-embed", input: [1, 2] }, 400, "input[0]"],
      [{ model: "demo-embed", input: "x", encoding_format: "int8" }, 400, "encoding_format"],
      [{ model: "demo-embed", input: "x", dimensions: 0 }, 400, "dimensions"],
      [{ model: "other", input: "x" }, 404, "model"],
    ];
    for (const [body, status, param] of cases) {
      const res = await post(demo.url, TOKEN, body);
      expect(res.status).toBe(status);
      expect(((await res.json()) as { error: { param: string } }).error.param).toBe(param);
    }
  });

  it("is proxied unchanged in proxy mode", async () => {
    const body = { model: "demo-embed", input: ["proxied"], encoding_format: "float" };
    const [direct, proxied] = await Promise.all([post(demo.url, TOKEN, body), post(proxy.url, "proxy-token", body)]);
    expect(proxied.status).toBe(200);
    expect(await proxied.json()).toEqual(await direct.json());
  });
});
