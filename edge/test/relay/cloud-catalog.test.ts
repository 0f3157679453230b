import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import { jsonAnswer, startScriptedHoster } from "../../../services/registry/test/hoster-servers.ts";
import { eventJson, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";

// The cloud API's key: it must reach the cloud server and nothing else (no log, error or event).
const CLOUD_KEY = "sk-cloud-SECRET-4b1e77d0";

const cloudModel = (id: string, upstream: string, alias?: string) => ({
  model_id: id,
  model_alias: alias,
  context_window: 128_000,
  input_price_per_1m_usd: "2.50",
  output_price_per_1m_usd: 10,
  upstream_model: upstream,
});

/** What the cloud server received: path, Authorization header and JSON body, per call. */
const received: Array<{ path: string; authorization: string | undefined; body: Record<string, unknown> }> = [];

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  for await (const part of req) parts.push(part as Buffer);
  return JSON.parse(Buffer.concat(parts).toString("utf8") || "{}") as Record<string, unknown>;
}

/** An OpenAI-style cloud API: 401 without the key; `fail500` echoes the key in a 500 body. */
async function cloudAnswer(req: IncomingMessage, res: ServerResponse) {
  const body = await readJson(req);
  received.push({ path: req.url ?? "", authorization: req.headers.authorization, body });
  if (req.headers.authorization !== `Bearer ${CLOUD_KEY}`) {
    jsonAnswer(res, 401, { error: { message: "Incorrect API key provided", code: "invalid_api_key" } });
    return;
  }
  if (body.model === "fail500") {
    jsonAnswer(res, 500, { error: { message: `server error for key ${CLOUD_KEY}` } });
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream" });
  const base = { id: "chatcmpl-cloud1", object: "chat.completion.chunk", created: 1_700_000_000, model: body.model };
  const send = (chunk: object) => res.write(`data: ${JSON.stringify({ ...base, ...chunk })}\n\n`);
  send({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] });
  send({ choices: [{ index: 0, delta: { content: "From the cloud." }, finish_reason: null }] });
  send({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
  send({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 4, total_tokens: 15 } });
  res.end("data: [DONE]\n\n");
}

let cloud: Awaited<ReturnType<typeof startScriptedHoster>>;
let h: Harness;
beforeAll(async () => {
  cloud = await startScriptedHoster((req, res) => void cloudAnswer(req, res));
  h = await startRelayHarness({
    // As OpenAI SDKs write it: the trailing /v1 is part of the base URL.
    CLOUD_BASE_URL: `${cloud.url}/v1/`,
    CLOUD_API_KEY: CLOUD_KEY,
    CLOUD_MODELS: JSON.stringify([
      cloudModel("gpt-cloud", "gpt-4o-mini-2024-07-18", "Cloud GPT"),
      cloudModel("cloud-broken", "fail500"),
    ]),
  });
});
afterAll(async () => {
  await h?.close();
  await cloud?.close();
});

const SCOPE = { subscriptionId: "sub_1", productId: "prod_1", hosterId: "00000000-0000-4000-8000-000000000001" };

async function usageEvent(request: RelayRequest): Promise<UsageCompleted> {
  const events = await waitFor(
    () => h.published.filter((e) => e.requestId === request.requestId),
    (found) => found.length > 0,
  );
  expect(events).toHaveLength(1);
  return events[0]!;
}

/** Fails when any value, as JSON (bigints as strings), holds the cloud key. */
function noKeyIn(...values: unknown[]) {
  const bigints = (_key: string, value: unknown) => (typeof value === "bigint" ? String(value) : value);
  for (const value of values) expect(JSON.stringify(value ?? "", bigints)).not.toContain(CLOUD_KEY);
}

describe("the cloud catalog", () => {
  it("lists cloud models after the local ones for a normal key, platform-owned, provider cloud", async () => {
    const { models } = await h.client.listModels({});
    const ids = models.map((m) => m.modelId);
    expect(ids.indexOf("demo-small")).toBeLessThan(ids.indexOf("gpt-cloud"));
    expect(models.find((m) => m.modelId === "gpt-cloud")).toMatchObject({
      modelAlias: "Cloud GPT",
      provider: "cloud",
      ownedBy: "platform",
      contextWindow: 128_000n,
    });
    noKeyIn(models);
  });

  it("resolves by id and by alias to a cloud route priced from the catalog, capped like local models", async () => {
    const expected = {
      modelId: "gpt-cloud",
      provider: "cloud",
      hosterId: "",
      productId: "",
      inputPricePer1mMicros: 2_500_000n,
      outputPricePer1mMicros: 10_000_000n,
      contextWindow: 128_000n,
      maxOutputTokensCap: 4096n,
      maxN: 1n,
      kind: "chat",
      open: false,
    };
    for (const name of ["gpt-cloud", "cloud gpt", "GPT-CLOUD"]) {
      expect(await h.route(name), name).toEqual(expected);
    }
  });

  it('keeps "auto" on the default local model', async () => {
    expect(await h.route("auto")).toMatchObject({ modelId: "demo-small", provider: "local" });
  });

  it("shows a scoped key no cloud model and resolves none for it", async () => {
    const { models } = await h.client.listModels({ scope: SCOPE });
    expect(models.filter((m) => m.provider === "cloud")).toEqual([]);
    for (const model of ["gpt-cloud", "Cloud GPT"]) {
      expect(h.refusal(model, SCOPE).code, model).toBe("model_not_found");
    }
  });
});

describe("chat with a cloud model", () => {
  it("streams from the cloud API with its key and upstream model name, under the catalog's name", async () => {
    const before = received.length;
    const localCalls = h.upstream.calls.length;
    const request = await h.chatRequest("Cloud GPT", { includeUsage: true });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const chunks = events.map(eventJson);
    expect(chunks.every((c) => c.model === "gpt-cloud")).toBe(true);
    const text = chunks
      .flatMap((c) => (c.choices as Array<{ delta: { content?: string } }>).map((ch) => ch.delta.content ?? ""))
      .join("");
    expect(text).toBe("From the cloud.");
    noKeyIn(chunks);

    expect(received.slice(before)).toHaveLength(1);
    const call = received[before]!;
    expect(call.path).toBe("/v1/chat/completions");
    expect(call.authorization).toBe(`Bearer ${CLOUD_KEY}`);
    expect(call.body).toMatchObject({ model: "gpt-4o-mini-2024-07-18", stream: true, max_tokens: 100 });
    // The local model server was not called, and never got the cloud key.
    expect(h.upstream.calls.length).toBe(localCalls);
    expect(h.upstream.calls.map((c) => c.authorization)).not.toContain(`Bearer ${CLOUD_KEY}`);

    const event = await usageEvent(request);
    expect(event).toMatchObject({ modelId: "gpt-cloud", provider: "cloud", hosterId: "", success: true });
    expect(event.inputTokens).toBe(11n);
    noKeyIn(event);
  });

  it("answers a non-streaming caller with one completion", async () => {
    const before = received.length;
    const request = await h.chatRequest("gpt-cloud", { stream: false });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events).toHaveLength(1);
    const completion = eventJson(events[0]!);
    expect(completion).toMatchObject({ object: "chat.completion", model: "gpt-cloud" });
    expect((completion.choices as Array<{ message: { content: string } }>)[0]!.message.content).toBe("From the cloud.");
    expect(received[before]).toMatchObject({
      authorization: `Bearer ${CLOUD_KEY}`,
      body: { model: "gpt-4o-mini-2024-07-18" },
    });
    expect(await usageEvent(request)).toMatchObject({ provider: "cloud", success: true });
  });

  it("turns a cloud 500 into upstream_error, with the key in no error, event or log line", async () => {
    const request = await h.chatRequest("cloud-broken");
    const { events, error } = await h.chat(request);
    expect(events).toEqual([]);
    const appError = error!;
    expect(appError.code).toBe("upstream_error");
    expect(appError.message).toBe("The model server failed to answer the request.");
    noKeyIn(error?.message, appError.toBody());
    const event = await usageEvent(request);
    expect(event).toMatchObject({ provider: "cloud", success: false, errorCode: "upstream_error", inputTokens: 0n });
  });

  it("never logs the cloud key (debug level, every line since start)", () => {
    const logs = h.logLines.join("\n");
    expect(logs).toContain("registry listening");
    expect(logs).toContain("upstream answered with an error status");
    expect(logs).not.toContain(CLOUD_KEY);
  });
});
