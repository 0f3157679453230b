import { expect } from "vitest";
import type { FastifyInstance } from "fastify";
import { createLogger } from "@mkt/runtime/logger";
import { buildApp } from "../src/app.ts";
import { loadHosterServerConfig } from "../src/config.ts";
import { startHosterServer, type HosterServerHandle } from "../src/server.ts";

export const silentLog = createLogger("hoster-server-test", "silent");

/** A config as main.ts would load it, on a free port. */
export function testConfig(env: Record<string, string> = {}) {
  return loadHosterServerConfig({ HOSTER_SERVER_TOKEN: "test-token", HOST: "127.0.0.1", PORT: "0", ...env });
}

export async function startServer(env: Record<string, string> = {}): Promise<HosterServerHandle> {
  return startHosterServer(testConfig(env), silentLog);
}

/** How each response of a server ended: `finished` false means the connection closed mid-answer. */
export interface ResponseWatch {
  app: FastifyInstance;
  url: string;
  ended: Array<{ url: string; finished: boolean; at: number }>;
}

/** A demo server whose responses the test can watch end (to see client disconnects land). */
export async function startWatchedServer(env: Record<string, string>): Promise<ResponseWatch> {
  const app = buildApp(testConfig(env));
  const ended: ResponseWatch["ended"] = [];
  app.server.on("request", (req, res) => {
    res.once("close", () => ended.push({ url: req.url ?? "", finished: res.writableFinished, at: Date.now() }));
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return { app, url: `http://127.0.0.1:${port}`, ended };
}

export async function waitFor(check: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export function post(url: string, token: string | undefined, body: unknown, signal?: AbortSignal) {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

export interface StreamChunk {
  choices: Array<{ delta: { role?: string; content?: string }; finish_reason: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/** Splits an SSE body into its data payloads; `[DONE]` is kept as the string it is. */
export function sseData(text: string): string[] {
  expect(text.endsWith("\n\n")).toBe(true);
  return text
    .split("\n\n")
    .filter((event) => event !== "")
    .map((event) => {
      expect(event.startsWith("data: ")).toBe(true);
      return event.slice("data: ".length);
    });
}

export function parseStream(text: string): { chunks: StreamChunk[]; content: string; done: boolean } {
  const data = sseData(text);
  const done = data.at(-1) === "[DONE]";
  const chunks = data.filter((d) => d !== "[DONE]").map((d) => JSON.parse(d) as StreamChunk);
  const content = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  return { chunks, content, done };
}
