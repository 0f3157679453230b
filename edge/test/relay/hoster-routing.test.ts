import type { IncomingMessage, ServerResponse } from "node:http";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { parseSecretsKey, SecretBox } from "@mkt/runtime/secret-box";
import { connect } from "@nats-io/transport-node";
import { CatalogChanged } from "@mkt/proto/events/v1/events";
import type { RouteScope } from "@mkt/proto/registry/v1/registry";
import { eventNames } from "@mkt/runtime/nats";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { eventJson, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";
import {
  jsonAnswer,
  modelList,
  startRealHoster,
  startScriptedHoster,
} from "../../../services/registry/test/hoster-servers.ts";

const LLAMA = "llama-3-8b.Q4_K_M.gguf";
const QWEN = "qwen2.5-7b";
const MISTRAL = "mistral-7b";

let h: Harness;
let acme: Awaited<ReturnType<typeof startRealHoster>>;
let other: Awaited<ReturnType<typeof startRealHoster>>;
let acmeId: string;
let otherId: string;

let registrations = 0;
async function register(
  server: { url: string; token: string },
  name: string,
  models: Array<{ modelId: string; modelAlias?: string; contextWindow?: bigint }>,
  harness: Harness = h,
): Promise<string> {
  const { hoster } = await harness.client.registerHoster({
    name,
    email: `routing${++registrations}@example.com`,
    endpointUrl: server.url,
    apiKey: server.token,
    inviteCode: harness.accounts.invite(),
    password: "a long enough password",
    clientIp: "203.0.113.20",
    models: models.map((m) => ({
      modelId: m.modelId,
      modelAlias: m.modelAlias ?? "",
      contextWindow: m.contextWindow ?? 8192n,
      kind: "",
      maxN: 0n,
      canonicalId: "",
      quantization: "",
    })),
  });
  return hoster!.hosterId;
}

const scopeOf = (hosterId: string): RouteScope => ({ subscriptionId: randomUUID(), productId: randomUUID(), hosterId });

/** A request as the edge admits it for a scoped key, its route from the edge's table. */
async function scopedChatRequest(
  scope: RouteScope,
  model: string,
  overrides: Partial<RelayRequest> = {},
  harness: Harness = h,
) {
  const route = await harness.route(model, scope);
  return harness.chatRequest(model, {
    keyId: "key_scoped",
    route,
    body: Buffer.from(JSON.stringify({ model, messages: [{ role: "user", content: "Say hello" }] })),
    stream: true,
    includeUsage: false,
    maxOutputTokens: 50n,
    promptTokens: 20n,
    receivedAtMs: BigInt(Date.now() - 5),
    ...overrides,
  });
}

/** The one usage.completed event published for a request. */
async function usageEvent(request: RelayRequest, harness: Harness = h): Promise<UsageCompleted> {
  const events = await waitFor(
    () => harness.published.filter((e) => e.requestId === request.requestId),
    (found) => found.length > 0,
  );
  expect(events).toHaveLength(1);
  return events[0]!;
}

beforeAll(async () => {
  // Frequent probes, so a server that goes away is marked unhealthy within a second.
  h = await startRelayHarness({ HOSTER_PROBE_INTERVAL_MS: "200", HOSTER_UNHEALTHY_AFTER: "2" });
  acme = await startRealHoster({ models: [LLAMA, QWEN] });
  other = await startRealHoster({ models: [MISTRAL] });
  acmeId = await register(acme, "Acme GPUs", [
    { modelId: LLAMA, modelAlias: "Llama 3 8B" },
    { modelId: QWEN, contextWindow: 32768n },
  ]);
  otherId = await register(other, "Other GPUs", [{ modelId: MISTRAL, modelAlias: "Mistral" }]);
  // Both hosters are in the edge's table (a table holds every hoster), so a refusal below is the rule's.
  await h.route(MISTRAL, scopeOf(otherId));
});
afterAll(async () => {
  await h?.close();
  await acme?.close();
  await other?.close();
});

describe("the edge's routing table, for a scoped key", () => {
  it("resolves the hoster's model id to a hoster route priced at 0, capped by the model's context", async () => {
    const scope = scopeOf(acmeId);
    const route = await h.route(QWEN, scope);
    expect(route).toEqual({
      modelId: QWEN,
      provider: "hoster",
      hosterId: acmeId,
      productId: scope.productId,
      inputPricePer1mMicros: 0n,
      outputPricePer1mMicros: 0n,
      contextWindow: 32768n,
      maxOutputTokensCap: 32768n,
      maxN: 1n,
      kind: "chat",
      open: false,
    });
  });

  it("resolves an alias, and an id, case-insensitively", async () => {
    const scope = scopeOf(acmeId);
    expect((await h.route("llama 3 8B", scope)).modelId).toBe(LLAMA);
    expect((await h.route("QWEN2.5-7B", scope)).modelId).toBe(QWEN);
  });

  it('resolves "auto" to the hoster\'s first model', async () => {
    expect(await h.route("auto", scopeOf(acmeId))).toMatchObject({
      modelId: LLAMA,
      provider: "hoster",
      hosterId: acmeId,
    });
    expect(await h.route("AUTO", scopeOf(otherId))).toMatchObject({ modelId: MISTRAL, hosterId: otherId });
  });

  it("answers model_not_found for another hoster's model and for local models, as for unknown ones", () => {
    const scope = scopeOf(acmeId);
    for (const model of [MISTRAL, "Mistral", "demo-small", "Demo Small", "gpt-9"]) {
      const err = h.refusal(model, scope);
      expect(err.code).toBe("model_not_found");
      expect(err.message).toBe(`The model \`${model}\` does not exist or you do not have access to it.`);
    }
  });

  it("answers model_not_found for a scope naming no registered hoster", () => {
    for (const hosterId of [randomUUID(), "h_1", ""]) {
      const err = h.refusal("auto", { ...scopeOf(acmeId), hosterId });
      expect(err.code).toBe("model_not_found");
    }
  });
});

describe("ListModels for a scoped key", () => {
  it("lists exactly the scope's hoster's models, owned by the hoster", async () => {
    const { models } = await h.client.listModels({ scope: scopeOf(acmeId) });
    const now = BigInt(Math.floor(Date.now() / 1000));
    expect(models.map((m) => m.modelId)).toEqual([LLAMA, QWEN]);
    expect(models[0]).toMatchObject({
      modelAlias: "Llama 3 8B",
      provider: "hoster",
      ownedBy: "Acme GPUs",
      contextWindow: 8192n,
    });
    expect(models[1]).toMatchObject({ modelAlias: "", provider: "hoster", contextWindow: 32768n });
    expect(models.every((m) => m.created > now - 3600n && m.created <= now)).toBe(true);
  });
});

describe("a normal key", () => {
  it("never sees or reaches hoster models", async () => {
    const { models } = await h.client.listModels({});
    expect(models.length).toBeGreaterThan(0);
    expect(models.every((m) => m.provider === "local" && m.ownedBy === "platform")).toBe(true);
    for (const model of [LLAMA, "Llama 3 8B", QWEN, MISTRAL]) {
      expect(h.refusal(model).code).toBe("model_not_found");
    }
    expect(await h.route("auto")).toMatchObject({
      modelId: "demo-small",
      provider: "local",
    });
  });
});

describe("ChatCompletion to a hoster", () => {
  it("streams a real hoster server's answer and records provider hoster with the hoster id", async () => {
    const request = await scopedChatRequest(scopeOf(acmeId), "Llama 3 8B", { includeUsage: true });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    const chunks = events.map(eventJson);
    expect(chunks.every((c) => c.model === LLAMA)).toBe(true);
    const content = chunks
      .flatMap((c) => (c.choices as Array<{ delta: { content?: string } }>).map((ch) => ch.delta.content ?? ""))
      .join("");
    expect(content.length).toBeGreaterThan(0);
    const usage = chunks.at(-1)!.usage as { completion_tokens: number };
    expect(usage.completion_tokens).toBeGreaterThan(0);

    expect(await usageEvent(request)).toMatchObject({
      modelId: LLAMA,
      provider: "hoster",
      hosterId: acmeId,
      success: true,
      errorCode: "",
      outputTokens: BigInt(usage.completion_tokens),
    });
  });

  it("answers a non-streaming caller with one assembled completion", async () => {
    const request = await scopedChatRequest(scopeOf(acmeId), QWEN, { stream: false });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events).toHaveLength(1);
    const completion = eventJson(events[0]!);
    expect(completion).toMatchObject({ object: "chat.completion", model: QWEN });
    const [choice] = completion.choices as Array<{ message: { content: string }; finish_reason: string }>;
    expect(choice!.message.content.length).toBeGreaterThan(0);
    expect(await usageEvent(request)).toMatchObject({ modelId: QWEN, provider: "hoster", hosterId: acmeId });
  });

  it("sends the hoster's own token to its server, and a 500 from it is upstream_error, billing nothing", async () => {
    const token = "scripted-hoster-token-4b1e7d";
    let failChat = false;
    const scripted = await startScriptedHoster((req, res) => scriptedAnswer(req, res, token, () => failChat));
    try {
      const hosterId = await register({ url: scripted.url, token }, "Scripted GPUs", [{ modelId: "tiny-1" }]);
      const ok = await scopedChatRequest(scopeOf(hosterId), "auto");
      expect((await h.chat(ok)).error).toBeUndefined();
      const chatCalls = scripted.requests.filter((r) => r.path === "/v1/chat/completions");
      expect(chatCalls.map((r) => r.authorization)).toEqual([`Bearer ${token}`]);

      failChat = true;
      const failing = await scopedChatRequest(scopeOf(hosterId), "tiny-1");
      const { events, error } = await h.chat(failing);
      expect(events).toEqual([]);
      const appError = error!;
      expect(appError.code).toBe("upstream_error");
      expect(appError.httpStatus).toBe(502);
      expect(JSON.stringify([error?.message, appError.toBody()])).not.toContain(token);
      expect(await usageEvent(failing)).toMatchObject({
        provider: "hoster",
        hosterId,
        success: false,
        errorCode: "upstream_error",
        inputTokens: 0n,
        outputTokens: 0n,
      });
      expect(h.logLines.join("\n")).not.toContain(token);
    } finally {
      await scripted.close();
    }
  });
});

describe("an unhealthy hoster", () => {
  it("answers no_healthy_upstream for explicit models and auto until its probes pass again", async () => {
    let server = await startRealHoster({ models: [LLAMA] });
    const { token, port } = server;
    const hosterId = await register(server, "Flaky GPUs", [{ modelId: LLAMA, modelAlias: "Llama" }]);
    const scope = scopeOf(hosterId);
    const resolvedEarlier = await scopedChatRequest(scope, LLAMA);

    await server.close();
    await waitFor(
      () => h.resolveNow(LLAMA, scope),
      (r) => r instanceof AppError && r.code === "no_healthy_upstream",
    );
    const err = h.refusal(LLAMA, scope);
    expect(err.code).toBe("no_healthy_upstream");
    expect(err.httpStatus).toBe(503);
    for (const model of ["auto", "llama"]) {
      expect(h.refusal(model, scope).code).toBe("no_healthy_upstream");
    }
    // Still listed (the subscription still covers it), and another scope is unaffected.
    expect((await h.client.listModels({ scope })).models.map((m) => m.modelId)).toEqual([LLAMA]);
    expect((await h.route("auto", scopeOf(acmeId))).hosterId).toBe(acmeId);
    // A route resolved before the hoster went down is refused at call time, once the edge's
    // table has the news (registry sends it on the probe's change).
    await waitFor(
      () => h.table.candidatesFor(resolvedEarlier.route).length,
      (n) => n === 0,
    );
    const { error } = await h.chat(resolvedEarlier);
    expect(error!.code).toBe("no_healthy_upstream");
    expect(await usageEvent(resolvedEarlier)).toMatchObject({ success: false, errorCode: "no_healthy_upstream" });

    server = await startRealHoster({ models: [LLAMA], token, port });
    try {
      const back = await waitFor(
        () => h.resolveNow("auto", scope),
        (r) => !(r instanceof AppError),
      );
      expect(back).toMatchObject({ modelId: LLAMA, hosterId });
      // The edge's table has it healthy again once registry's next table arrives.
      await waitFor(
        () => h.table.candidatesFor(resolvedEarlier.route).length,
        (n) => n === 1,
      );
      expect((await h.chat(await scopedChatRequest(scope, "llama"))).error).toBeUndefined();
    } finally {
      await server.close();
    }
  });
});

describe("without ALLOW_PRIVATE_UPSTREAMS", () => {
  it("calls hosters only through the guarded connector, while the trusted local server is still called", async () => {
    const strict = await startRelayHarness({ ALLOW_PRIVATE_UPSTREAMS: "false" });
    const token = "scripted-hoster-token-private";
    const scripted = await startScriptedHoster((req, res) => scriptedAnswer(req, res, token, () => false));
    const db = new pg.Client({ connectionString: strict.databaseUrl });
    await db.connect();
    try {
      // Registration would refuse a loopback endpoint; this row stands for a name that resolved to
      // a public address then and to 127.0.0.1 now (DNS rebinding).
      const hosterId = randomUUID();
      const sealed = new SecretBox(parseSecretsKey(strict.secretsKey)).seal(token, `hoster:${hosterId}:api_key`);
      await db.query(
        `insert into registry.hosters (id, name, endpoint_url, api_key_sealed, status) values ($1, $2, $3, $4, 'healthy')`,
        [hosterId, "Rebound GPUs", scripted.url, sealed],
      );
      await db.query(
        `insert into registry.hoster_models (hoster_id, model_id, model_alias, context_window, canonical_id) values ($1, 'tiny-1', '', 8192, 'tiny-1')`,
        [hosterId],
      );
      // Written behind registry's back: its nudge makes registry send the edges the new table.
      const nudger = await connect({ servers: strict.config.NATS_URL });
      nudger.publish(
        eventNames(strict.config.EVENTS_PREFIX).catalogChanged,
        CatalogChanged.encode({ hosterId }).finish(),
      );
      await nudger.drain();

      const request = await scopedChatRequest(scopeOf(hosterId), "tiny-1", {}, strict);
      const { error } = await strict.chat(request);
      expect(error!.code).toBe("upstream_error");
      expect(scripted.requests).toEqual([]);
      expect(await usageEvent(request, strict)).toMatchObject({ provider: "hoster", errorCode: "upstream_error" });

      const local = await strict.chatRequest("demo-small");
      expect((await strict.chat(local)).error).toBeUndefined();
      expect(strict.logLines.join("\n")).not.toContain(token);
    } finally {
      await db.end();
      await scripted.close();
      await strict.close();
    }
  });
});

/** An OpenAI-compatible hoster server that requires `token`; `fail()` makes chat answer 500. */
function scriptedAnswer(req: IncomingMessage, res: ServerResponse, token: string, fail: () => boolean): void {
  req.resume();
  req.on("end", () => {
    if (req.url === "/health") return jsonAnswer(res, 200, { status: "ok" });
    if (req.headers.authorization !== `Bearer ${token}`) return jsonAnswer(res, 401, { error: { message: "no" } });
    if (req.url === "/v1/models") return jsonAnswer(res, 200, modelList(["tiny-1"]));
    if (req.url !== "/v1/chat/completions") return jsonAnswer(res, 404, { error: { message: "not found" } });
    if (fail()) return jsonAnswer(res, 500, { error: { message: `internal detail ${token}` } });
    res.writeHead(200, { "content-type": "text/event-stream" });
    const base = { id: "chatcmpl-s1", object: "chat.completion.chunk", created: 1_700_000_000, model: "tiny-1" };
    const send = (chunk: object) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    send({ ...base, choices: [{ index: 0, delta: { role: "assistant", content: "Hi" }, finish_reason: null }] });
    send({ ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
    send({ ...base, choices: [], usage: { prompt_tokens: 5, completion_tokens: 1 } });
    res.end("data: [DONE]\n\n");
  });
}
