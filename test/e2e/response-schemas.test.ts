import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Ajv, type ValidateFunction } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// What /docs promises is what comes back: real answers of real routes validate against the 200
// (or 201) schema the OpenAPI document declares for them, and a streamed chat answer relayed from
// an upstream keeps the fields the upstream added beyond OpenAI's (chunks are relayed as written,
// never re-serialized under a schema).

type Json = Record<string, unknown>;
type Operation = { responses?: Record<string, { content?: Record<string, { schema?: object }> }> };

const MODEL = "schema-model";
/** Fields an upstream may add beyond OpenAI's shape (a provider's own): they must reach the client. */
const EXTRA = { provider_trace: { region: "eu-1", cached: true } };
/** A field of its own in a delta. */
const DELTA_EXTRA = { provider_note: "cached" };

/** A tiny OpenAI-compatible upstream whose chunks carry fields of its own. */
async function startExtraFieldUpstream() {
  const token = randomToken(24);
  const server = createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  async function handle(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? "").split("?")[0];
    if (req.method === "GET" && path === "/health") return json(res, 200, { status: "ok" });
    if (req.headers.authorization !== `Bearer ${token}`) return json(res, 401, { error: { message: "bad token" } });
    if (req.method === "GET" && path === "/v1/models") {
      return json(res, 200, { object: "list", data: [{ id: MODEL, object: "model" }] });
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Json;
    // The edge asks every upstream for a stream (it meters the answer as it relays it).
    const id = `chatcmpl-up${randomToken(6)}`;
    const created = Math.floor(Date.now() / 1000);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const send = (payload: Json) =>
      res.write(
        `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: String(body.model), ...payload, ...EXTRA })}\n\n`,
      );
    const delta = (d: Json, finish: string | null = null) =>
      send({ choices: [{ index: 0, delta: d, logprobs: null, finish_reason: finish }] });
    delta({ role: "assistant", content: "" });
    delta({ content: "An answer ", ...DELTA_EXTRA });
    delta({ content: "with extras." });
    delta({}, "stop");
    send({ choices: [], usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } });
    res.end("data: [DONE]\n\n");
  }
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, token, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

let upstream: Awaited<ReturnType<typeof startExtraFieldUpstream>>;
let system: RunningSystem;
let doc: { paths: Record<string, Record<string, Operation>> };
const ajv = new Ajv({ strict: false, allErrors: true });

beforeAll(async () => {
  upstream = await startExtraFieldUpstream();
  system = await startSystem({
    registry: {
      LOCAL_MODEL_URL: upstream.url,
      LOCAL_MODEL_TOKEN: upstream.token,
      LOCAL_MODELS: JSON.stringify([
        {
          model_id: MODEL,
          model_alias: "Schema Model",
          context_window: 16384,
          input_price_per_1m_usd: "0.50",
          output_price_per_1m_usd: "1.50",
        },
      ]),
    },
  });
  doc = (await (await fetch(`${system.url}/docs/json`)).json()) as typeof doc;
}, 60_000);
afterAll(async () => {
  await system?.close();
  await upstream?.close();
});

/** The validator of the JSON schema `/docs/json` declares for `method path` answering `status`. */
function declared(method: string, path: string, status: number): ValidateFunction {
  const operation = doc.paths[path]?.[method.toLowerCase()];
  const schema = operation?.responses?.[String(status)]?.content?.["application/json"]?.schema;
  if (!schema) throw new Error(`/docs/json declares no ${status} JSON schema for ${method} ${path}`);
  return ajv.compile(schema);
}

/** Calls a route for real and checks its answer against the schema declared for `documented`. */
async function checkAgainstDocs(
  method: string,
  documented: string,
  url: string,
  init: { apiKey: string; body?: unknown; status?: number },
): Promise<Json> {
  const res = await fetch(`${system.url}${url}`, {
    method,
    headers: {
      authorization: `Bearer ${init.apiKey}`,
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  const status = init.status ?? 200;
  expect(res.status, `${method} ${url}: ${text}`).toBe(status);
  const body = JSON.parse(text) as Json;
  const validate = declared(method, documented, status);
  expect(validate(body) ? [] : validate.errors, `${method} ${url} against /docs/json`).toEqual([]);
  return body;
}

describe("real answers against the OpenAPI document", () => {
  it("validate against each route's declared schema", async () => {
    const { apiKey } = await signUp(system.url);
    const chat = await checkAgainstDocs("POST", "/v1/chat/completions", "/v1/chat/completions", {
      apiKey,
      body: { model: MODEL, messages: [{ role: "user", content: "Hello" }] },
    });
    await checkAgainstDocs("GET", "/v1/models", "/v1/models", { apiKey });
    // The schemas bite: a list whose data is not a list is refused.
    expect(declared("GET", "/v1/models", 200)({ object: "list", data: "not a list" })).toBe(false);
    await checkAgainstDocs("GET", "/v1/models/{model}", `/v1/models/${MODEL}`, { apiKey });
    await checkAgainstDocs("GET", "/v1/keys", "/v1/keys", { apiKey });
    await checkAgainstDocs("POST", "/v1/keys", "/v1/keys", {
      apiKey,
      body: { name: "ci", limit_usd: 5, limit_reset: "monthly" },
      status: 201,
    });
    await checkAgainstDocs("GET", "/v1/subscriptions", "/v1/subscriptions", { apiKey });
    await checkAgainstDocs("GET", "/v1/hosters", "/v1/hosters", { apiKey });
    await checkAgainstDocs("GET", "/v1/usage/tokens", "/v1/usage/tokens?days=30&interval=day", { apiKey });
    await checkAgainstDocs("GET", "/v1/usage/breakdown", "/v1/usage/breakdown?days=30", { apiKey });

    // A generation is shown once settled (about a second after the answer); until then 404.
    const id = String(chat.id);
    const deadline = Date.now() + 15_000;
    while ((await fetchStatus(`/v1/generations/${id}`, apiKey)) === 404 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const generation = await checkAgainstDocs("GET", "/v1/generations/{id}", `/v1/generations/${id}`, { apiKey });
    expect(generation.id).toBe(id);
    const usage = await checkAgainstDocs("GET", "/v1/usage", "/v1/usage", { apiKey });
    expect(usage).toBeTypeOf("object");
  }, 60_000);

  it("answers GET /auth/session for nobody with a body its schema allows", async () => {
    const res = await fetch(`${system.url}/auth/session`);
    expect(res.status).toBe(200);
    const validate = declared("GET", "/auth/session", 200);
    const body: unknown = await res.json();
    expect(validate(body) ? [] : validate.errors).toEqual([]);
  });
});

async function fetchStatus(url: string, apiKey: string): Promise<number> {
  const res = await fetch(`${system.url}${url}`, { headers: { authorization: `Bearer ${apiKey}` } });
  await res.body?.cancel();
  return res.status;
}

describe("an upstream's own fields", () => {
  it("arrive to a streaming client in every chunk of the answer, beside OpenAI's", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: "user", content: "Hello" }],
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(res.status).toBe(200);
    const chunks = (await res.text())
      .split("\n\n")
      .filter((event) => event.startsWith("data: {"))
      .map((event) => JSON.parse(event.slice("data: ".length)) as Json & { choices: Array<{ delta?: Json }> });
    expect(chunks.length).toBeGreaterThanOrEqual(4);
    // The chunks of the answer are the upstream's, as written; the last, the usage, is the edge's own.
    const relayed = chunks.filter((chunk) => chunk.choices.length > 0);
    expect(relayed.length).toBeGreaterThanOrEqual(4);
    for (const chunk of relayed) expect(chunk).toMatchObject(EXTRA);
    const deltas = chunks.flatMap((c) => c.choices.map((choice) => choice.delta ?? {}));
    expect(deltas).toContainEqual({ content: "An answer ", ...DELTA_EXTRA });
    expect(deltas.map((d) => d.content ?? "").join("")).toBe("An answer with extras.");
    expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: expect.any(Number), cost: expect.any(Number) });
  });

  it("arrive at the top of a non-streamed answer too, which the edge assembles from the chunks", async () => {
    const { apiKey } = await signUp(system.url);
    const res = await fetch(`${system.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Hello" }] }),
    });
    expect(res.status).toBe(200);
    const completion = (await res.json()) as Json & { choices: Array<{ message: Json }> };
    expect(completion).toMatchObject({ ...EXTRA, object: "chat.completion" });
    expect(completion.choices[0]!.message.content).toBe("An answer with extras.");
  });
});
