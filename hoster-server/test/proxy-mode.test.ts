import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HosterServerHandle } from "../src/server.ts";
import { parseStream, post, startServer, startWatchedServer, waitFor, type ResponseWatch } from "./harness.ts";

// Two real servers: a demo-mode hoster server as the OpenAI-compatible backend, and a proxy-mode
// hoster server (UPSTREAM_URL) in front of it. Each has its own token.
const BACKEND_TOKEN = "backend-token";
const PROXY_TOKEN = "proxy-token";
const messages = [{ role: "user", content: "Say something about proxies." }];

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

let backend: ResponseWatch;
/** The Authorization header of every request the backend received, in order. */
const backendAuth: Array<string | undefined> = [];
let proxy: HosterServerHandle;

beforeAll(async () => {
  backend = await startWatchedServer({ HOSTER_SERVER_TOKEN: BACKEND_TOKEN, DEMO_MODELS: "demo-small,demo-large" });
  backend.app.server.on("request", (req) => backendAuth.push(req.headers.authorization));
  proxy = await startServer({
    HOSTER_SERVER_TOKEN: PROXY_TOKEN,
    UPSTREAM_URL: backend.url,
    UPSTREAM_API_KEY: BACKEND_TOKEN,
  });
});
afterAll(async () => {
  await proxy?.close();
  await backend?.app.close();
});

/** A URL where nothing listens: a port that was just free. */
async function closedPortUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

async function expectUpstreamError(res: Response): Promise<void> {
  expect(res.status).toBe(502);
  const body = (await res.json()) as ErrorBody;
  expect(body).toEqual({
    error: { message: expect.any(String), type: "api_error", param: null, code: "upstream_error" },
  });
  // Nothing about the backend (its address, its token) reaches the caller.
  expect(body.error.message).not.toContain("127.0.0.1");
  expect(JSON.stringify(body)).not.toContain(BACKEND_TOKEN);
}

describe("pass-through", () => {
  it("relays a non-streamed completion unchanged in content", async () => {
    const [direct, proxied] = await Promise.all([
      post(backend.url, BACKEND_TOKEN, { model: "demo-small", messages }),
      post(proxy.url, PROXY_TOKEN, { model: "demo-small", messages }),
    ]);
    expect(proxied.status).toBe(200);
    expect(proxied.headers.get("content-type")).toMatch(/^application\/json/);
    const a = (await direct.json()) as OpenAI.ChatCompletion;
    const b = (await proxied.json()) as OpenAI.ChatCompletion;
    expect(b.choices[0]!.message.content).toBeTruthy();
    expect(b.choices).toEqual(a.choices);
    expect(b.usage).toEqual(a.usage);
    expect(b.model).toBe("demo-small");
  });

  it("relays a streamed completion as SSE, chunk by chunk", async () => {
    const body = { model: "demo-large", messages, stream: true, stream_options: { include_usage: true } };
    const [direct, proxied] = await Promise.all([
      post(backend.url, BACKEND_TOKEN, body),
      post(proxy.url, PROXY_TOKEN, body),
    ]);
    expect(proxied.status).toBe(200);
    expect(proxied.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const a = parseStream(await direct.text());
    const b = parseStream(await proxied.text());
    expect(b.done).toBe(true);
    expect(b.content).not.toBe("");
    expect(b.content).toBe(a.content);
    expect(b.chunks.length).toBe(a.chunks.length);
    expect(b.chunks.at(-1)!.usage).toEqual(a.chunks.at(-1)!.usage);
  });

  it("works with the official OpenAI SDK, streamed and not", async () => {
    const client = new OpenAI({ apiKey: PROXY_TOKEN, baseURL: `${proxy.url}/v1`, maxRetries: 0 });
    const plain = await client.chat.completions.create({ model: "demo-small", messages: [...messages] as never });
    const stream = await client.chat.completions.create({
      model: "demo-small",
      messages: [...messages] as never,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe(plain.choices[0]!.message.content);
  });

  it("relays /v1/models", async () => {
    const [direct, proxied] = await Promise.all([
      fetch(`${backend.url}/v1/models`, { headers: { authorization: `Bearer ${BACKEND_TOKEN}` } }),
      fetch(`${proxy.url}/v1/models`, { headers: { authorization: `Bearer ${PROXY_TOKEN}` } }),
    ]);
    expect(proxied.status).toBe(200);
    const models = (await proxied.json()) as { object: string; data: Array<{ id: string }> };
    expect(models).toEqual(await direct.json());
    expect(models.data.map((m) => m.id)).toEqual(["demo-small", "demo-large"]);
  });

  it("relays the backend's own client errors (unknown model) as they are", async () => {
    const res = await post(proxy.url, PROXY_TOKEN, { model: "no-such-model", messages });
    expect(res.status).toBe(404);
    expect(((await res.json()) as ErrorBody).error).toMatchObject({ code: "model_not_found", param: "model" });
  });
});

describe("tokens", () => {
  it("requires the caller's token and never calls the backend without it", async () => {
    const before = backendAuth.length;
    const refused = await Promise.all([
      fetch(`${proxy.url}/v1/models`),
      post(proxy.url, undefined, { model: "demo-small", messages }),
      // The backend's token is not a key to the proxy.
      post(proxy.url, BACKEND_TOKEN, { model: "demo-small", messages }),
    ]);
    for (const res of refused) {
      expect(res.status).toBe(401);
      expect(((await res.json()) as ErrorBody).error).toMatchObject({
        type: "authentication_error",
        code: "invalid_api_key",
      });
    }
    expect(backendAuth.length).toBe(before);
    expect((await fetch(`${proxy.url}/health`)).status).toBe(200);
  });

  it("forwards UPSTREAM_API_KEY, not the caller's token", async () => {
    const before = backendAuth.length;
    const res = await post(proxy.url, PROXY_TOKEN, { model: "demo-small", messages });
    expect(res.status).toBe(200);
    await res.json();
    const seen = backendAuth.slice(before);
    expect(seen).toEqual([`Bearer ${BACKEND_TOKEN}`]);
    expect(backendAuth.join(" ")).not.toContain(PROXY_TOKEN);
  });
});

describe("backend failures", () => {
  it("answers 502 upstream_error when the backend refuses UPSTREAM_API_KEY", async () => {
    const wrongKey = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: backend.url,
      UPSTREAM_API_KEY: "not-the-backend-token",
    });
    try {
      await expectUpstreamError(await post(wrongKey.url, PROXY_TOKEN, { model: "demo-small", messages }));
      await expectUpstreamError(await post(wrongKey.url, PROXY_TOKEN, { model: "demo-small", messages, stream: true }));
      await expectUpstreamError(
        await fetch(`${wrongKey.url}/v1/models`, { headers: { authorization: `Bearer ${PROXY_TOKEN}` } }),
      );
    } finally {
      await wrongKey.close();
    }
  });

  it("answers 502 upstream_error when the backend cannot be reached", async () => {
    const orphan = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: await closedPortUrl(),
      UPSTREAM_API_KEY: BACKEND_TOKEN,
    });
    try {
      await expectUpstreamError(await post(orphan.url, PROXY_TOKEN, { model: "demo-small", messages }));
      await expectUpstreamError(
        await fetch(`${orphan.url}/v1/models`, { headers: { authorization: `Bearer ${PROXY_TOKEN}` } }),
      );
      // The server itself stays healthy: it is the backend that is down.
      expect((await fetch(`${orphan.url}/health`)).status).toBe(200);
    } finally {
      await orphan.close();
    }
  });

  it("answers 502 upstream_error, echoing nothing, when the backend fails with a 5xx", async () => {
    const seenAuth: Array<string | undefined> = [];
    const failing = createServer((req, res) => {
      seenAuth.push(req.headers.authorization);
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "CUDA out of memory in /opt/models/secret-path" }));
    });
    await new Promise<void>((resolve) => failing.listen(0, "127.0.0.1", resolve));
    const front = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: `http://127.0.0.1:${(failing.address() as AddressInfo).port}`,
    });
    try {
      const res = await post(front.url, PROXY_TOKEN, { model: "demo-small", messages, stream: true });
      const text = await res.clone().text();
      await expectUpstreamError(res);
      expect(text).not.toContain("CUDA");
      // Without UPSTREAM_API_KEY (an Ollama on localhost) no Authorization is sent at all.
      expect(seenAuth).toEqual([undefined]);
    } finally {
      await front.close();
      failing.closeAllConnections();
      await new Promise((resolve) => failing.close(resolve));
    }
  });

  it("answers 400 invalid_request for a body that is not a JSON object, without calling the backend", async () => {
    const before = backendAuth.length;
    for (const body of ["[1,2]", "{not json"]) {
      const res = await post(proxy.url, PROXY_TOKEN, body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as ErrorBody).error).toMatchObject({
        type: "invalid_request_error",
        code: "invalid_request",
      });
    }
    expect(backendAuth.length).toBe(before);
  });
});

describe("UPSTREAM_URL forms", () => {
  it.each([
    ["ending in /v1", "/v1"],
    ["ending in /v1/", "/v1/"],
    ["with a trailing slash", "/"],
  ])("accepts a base URL %s", async (_label, suffix) => {
    const server = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: `${backend.url}${suffix}`,
      UPSTREAM_API_KEY: BACKEND_TOKEN,
    });
    try {
      const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${PROXY_TOKEN}` } });
      expect(models.status).toBe(200);
      const chat = await post(server.url, PROXY_TOKEN, { model: "demo-small", messages, stream: true });
      expect(chat.status).toBe(200);
      expect(parseStream(await chat.text()).done).toBe(true);
    } finally {
      await server.close();
    }
  });
});

describe("disconnects", () => {
  it("aborts the backend's answer when the client leaves mid-stream", async () => {
    // 400 tokens at 20/s would take 20 s; the client leaves after the first chunk.
    const slow = await startWatchedServer({
      HOSTER_SERVER_TOKEN: BACKEND_TOKEN,
      DEMO_TOKENS_PER_SECOND: "20",
      DEMO_COMPLETION_TOKENS: "400",
    });
    const front = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: slow.url,
      UPSTREAM_API_KEY: BACKEND_TOKEN,
    });
    try {
      const abort = new AbortController();
      const res = await post(front.url, PROXY_TOKEN, { model: "demo-small", messages, stream: true }, abort.signal);
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const first = await reader.read();
      expect(new TextDecoder().decode(first.value)).toContain('"role":"assistant"');
      expect(slow.ended).toEqual([]);
      const leftAt = Date.now();
      abort.abort();
      await waitFor(() => slow.ended.length === 1);
      expect(slow.ended[0]).toMatchObject({ url: "/v1/chat/completions", finished: false });
      expect(slow.ended[0]!.at - leftAt).toBeLessThan(1_000);
    } finally {
      await front.close();
      await slow.app.close();
    }
  });

  it("aborts the backend's answer when the client leaves before the response starts", async () => {
    // A non-streamed answer of 400 tokens at 20/s starts after 20 s; the client leaves before.
    const slow = await startWatchedServer({
      HOSTER_SERVER_TOKEN: BACKEND_TOKEN,
      DEMO_TOKENS_PER_SECOND: "20",
      DEMO_COMPLETION_TOKENS: "400",
    });
    let received = 0;
    slow.app.server.on("request", () => received++);
    const front = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: slow.url,
      UPSTREAM_API_KEY: BACKEND_TOKEN,
    });
    try {
      const abort = new AbortController();
      const pending = post(front.url, PROXY_TOKEN, { model: "demo-small", messages }, abort.signal);
      await waitFor(() => received === 1);
      const leftAt = Date.now();
      abort.abort();
      await expect(pending).rejects.toThrow();
      await waitFor(() => slow.ended.length === 1);
      expect(slow.ended[0]).toMatchObject({ url: "/v1/chat/completions", finished: false });
      expect(slow.ended[0]!.at - leftAt).toBeLessThan(1_000);
    } finally {
      await front.close();
      await slow.app.close();
    }
  });

  it("cuts proxied streams after the shutdown grace period", async () => {
    const slow = await startWatchedServer({
      HOSTER_SERVER_TOKEN: BACKEND_TOKEN,
      DEMO_TOKENS_PER_SECOND: "20",
      DEMO_COMPLETION_TOKENS: "400",
    });
    const front = await startServer({
      HOSTER_SERVER_TOKEN: PROXY_TOKEN,
      UPSTREAM_URL: slow.url,
      UPSTREAM_API_KEY: BACKEND_TOKEN,
    });
    try {
      const res = await post(front.url, PROXY_TOKEN, { model: "demo-small", messages, stream: true });
      const reader = res.body!.getReader();
      await reader.read();
      const started = Date.now();
      await front.close(200);
      expect(Date.now() - started).toBeLessThan(2_000);
      await waitFor(() => slow.ended.length === 1);
      expect(slow.ended[0]!.finished).toBe(false);
      // The client sees its stream end early rather than hang.
      await expect(
        (async () => {
          for (;;) if ((await reader.read()).done) return;
        })(),
      ).rejects.toThrow();
    } finally {
      await slow.app.close();
    }
  });
});
