import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import { HosterModel, Route, type RouteScope } from "@mkt/proto/registry/v1/registry";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import {
  CONTENT,
  eventJson,
  startRelayHarness,
  UPSTREAM_TOKEN,
  waitFor,
  type RelayHarness as Harness,
} from "./relay-harness.ts";
import { jsonAnswer, modelList, startScriptedHoster } from "../../../services/registry/test/hoster-servers.ts";

type Mode = "ok" | "500" | "400" | "reset" | "mid" | "slow" | "down";

/**
 * One replica of the local model server whose behaviour a test switches; it counts chat calls.
 * It lists `listed` on /v1/models: not the catalog's upstream model by default, so the probes that
 * bring back a model's last ejected server fail unless a test wants them to succeed.
 */
async function startReplica(token = UPSTREAM_TOKEN, listed = ["m-1"]) {
  const state = { mode: "ok" as Mode, chats: 0 };
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      // Down (restarting): everything fails, the probes included.
      if (state.mode === "down") return jsonAnswer(res, 503, {});
      if (req.url === "/health") return jsonAnswer(res, 200, { status: "ok" });
      if (req.url === "/v1/models") return jsonAnswer(res, 200, modelList(listed));
      state.chats++;
      if (req.headers.authorization !== `Bearer ${token}`) return jsonAnswer(res, 401, {});
      if (state.mode === "500") return jsonAnswer(res, 500, { error: { message: "boom" } });
      if (state.mode === "400") return jsonAnswer(res, 400, { error: { message: "bad field" } });
      if (state.mode === "reset") return req.socket.destroy();
      void answer(res, state.mode);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    state,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** An honest stream; `mid` sends two chunks, then drops the connection; `slow` pauses after them. */
async function answer(res: ServerResponse, mode: Mode = "ok"): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream" });
  const base = { id: "chatcmpl-r", object: "chat.completion.chunk", created: 1_700_000_000, model: "m" };
  const delta = (d: object, finish: string | null = null) =>
    res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta: d, finish_reason: finish }] })}\n\n`);
  delta({ role: "assistant", content: "" });
  delta({ content: CONTENT[0] });
  if (mode === "mid") {
    setTimeout(() => res.socket?.destroy(), 20);
    return;
  }
  if (mode === "slow") await new Promise((r) => setTimeout(r, 300));
  if (res.destroyed) return;
  for (const piece of CONTENT.slice(1)) delta({ content: piece });
  delta({}, "stop");
  res.end("data: [DONE]\n\n");
}

type Replica = Awaited<ReturnType<typeof startReplica>>;

/** The one usage event of a request. */
async function usageOf(h: Harness, request: RelayRequest): Promise<UsageCompleted> {
  const events = await waitFor(
    () => h.published.filter((e) => e.requestId === request.requestId),
    (found) => found.length > 0,
  );
  expect(events).toHaveLength(1);
  return events[0]!;
}

const textOf = (events: Awaited<ReturnType<Harness["chat"]>>["events"]) =>
  events
    .filter((e) => e.chunk)
    .map((e) => (eventJson(e).choices as Array<{ delta: { content?: string } }>)[0]?.delta.content ?? "")
    .join("");

describe("failover between the servers of one model", () => {
  let first: Replica;
  let second: Replica;
  let h: Harness;
  beforeAll(async () => {
    [first, second] = await Promise.all([startReplica(), startReplica()]);
    // Ejection is out of the way here (its own tests follow).
    h = await startRelayHarness({
      LOCAL_MODEL_URL: `${first.url},${second.url}`,
      UPSTREAM_EJECT_AFTER_FAILURES: "1000",
    });
  });
  afterAll(async () => {
    await h?.close();
    await Promise.all([first?.close(), second?.close()]);
  });

  for (const mode of ["500", "reset"] as const) {
    it(`moves a request the first server fails before its first byte (${mode}) to the next: one answer, billed once`, async () => {
      first.state.mode = mode;
      const before = { first: first.state.chats, second: second.state.chats };
      const request = await h.chatRequest("demo-small");
      const { events, error } = await h.chat(request);
      expect(error).toBeUndefined();
      expect(events.some((e) => e.error)).toBe(false);
      expect(textOf(events)).toBe(CONTENT.join(""));
      expect(first.state.chats - before.first).toBe(1);
      expect(second.state.chats - before.second).toBe(1);
      const usage = await usageOf(h, request);
      expect(usage).toMatchObject({ success: true, errorCode: "", modelId: "demo-small", provider: "local" });
      expect(usage.outputTokens).toBeGreaterThan(0n);
    });
  }

  it("moves a non-streaming request too (nothing reached the caller before the end)", async () => {
    first.state.mode = "mid";
    const request = await h.chatRequest("demo-small", { stream: false });
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(events).toHaveLength(1);
    const completion = eventJson(events[0]!) as { choices: Array<{ message: { content: string } }> };
    expect(completion.choices[0]!.message.content).toBe(CONTENT.join(""));
    expect((await usageOf(h, request)).success).toBe(true);
  });

  it("never retries once the first byte reached the caller: the stream ends with an error event", async () => {
    first.state.mode = "mid";
    const secondBefore = second.state.chats;
    const request = await h.chatRequest("demo-small");
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe(CONTENT[0]);
    expect(events.at(-1)?.error).toMatchObject({ code: "upstream_error" });
    expect(second.state.chats).toBe(secondBefore);
    const usage = await usageOf(h, request);
    expect(usage).toMatchObject({ success: false, errorCode: "upstream_error" });
    expect(usage.outputTokens).toBeGreaterThan(0n);
  });

  it("answers the last server's failure when every server fails, billing nothing", async () => {
    first.state.mode = "500";
    second.state.mode = "500";
    try {
      const request = await h.chatRequest("demo-small");
      const { error } = await h.chat(request);
      expect(error!.code).toBe("upstream_error");
      expect(await usageOf(h, request)).toMatchObject({ success: false, outputTokens: 0n, inputTokens: 0n });
    } finally {
      second.state.mode = "ok";
    }
  });

  it("moves a request off a server that refuses connections", async () => {
    const down = await startRelayHarness({ LOCAL_MODEL_URL: `http://127.0.0.1:9,${second.url}` });
    try {
      const request = await down.chatRequest("demo-small");
      const { events, error } = await down.chat(request);
      expect(error).toBeUndefined();
      expect(textOf(events)).toBe(CONTENT.join(""));
      expect((await usageOf(down, request)).success).toBe(true);
    } finally {
      await down.close();
    }
  });
});

describe("outlier ejection of local servers", () => {
  const BACKOFF_MS = 400;
  let first: Replica;
  let second: Replica;
  let h: Harness;
  beforeAll(async () => {
    [first, second] = await Promise.all([startReplica(), startReplica()]);
    h = await startRelayHarness({
      LOCAL_MODEL_URL: `${first.url},${second.url}`,
      UPSTREAM_EJECT_AFTER_FAILURES: "2",
      UPSTREAM_EJECT_BACKOFF_MS: String(BACKOFF_MS),
    });
  });
  afterAll(async () => {
    await h?.close();
    await Promise.all([first?.close(), second?.close()]);
  });

  async function served(): Promise<void> {
    const request = await h.chatRequest("demo-small");
    const { events, error } = await h.chat(request);
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe(CONTENT.join(""));
  }

  it("sends a server no calls for the back-off after failures in a row, then tries it again", async () => {
    expect((await h.route("auto")).modelId).toBe("demo-small");
    // A success between two failures starts the count again.
    first.state.mode = "500";
    await served();
    first.state.mode = "ok";
    await served();
    first.state.mode = "500";
    await served();
    await served();
    expect(first.state.chats).toBe(4);
    // Two failures in a row: ejected, calls go straight to the second server.
    const ejectedAt = Date.now();
    await served();
    await served();
    expect(first.state.chats).toBe(4);
    expect(second.state.chats).toBe(5);

    // Back-off over: the first server is tried again; it still fails, so it is ejected at once
    // (on probation), for a doubled back-off.
    await new Promise((r) => setTimeout(r, BACKOFF_MS - (Date.now() - ejectedAt) + 20));
    await served();
    expect(first.state.chats).toBe(5);
    await new Promise((r) => setTimeout(r, BACKOFF_MS + 20));
    await served();
    expect(first.state.chats).toBe(5);

    // Healthy again: after the doubled back-off it takes the calls again, and keeps them.
    first.state.mode = "ok";
    await new Promise((r) => setTimeout(r, BACKOFF_MS + 50));
    await served();
    await served();
    expect(first.state.chats).toBe(7);
    expect(second.state.chats).toBe(7);
  });

  it("counts neither a caller's cancel nor a request the server refuses as invalid (400)", async () => {
    first.state.mode = "slow";
    for (let i = 0; i < 2; i++) {
      const { cancelled } = await h.chat(await h.chatRequest("demo-small"), 1);
      expect(cancelled).toBe(true);
    }
    first.state.mode = "400";
    const secondBefore = second.state.chats;
    for (let i = 0; i < 2; i++) {
      // The body is the caller's problem: no other server is tried.
      const { error } = await h.chat(await h.chatRequest("demo-small"));
      expect(error!.code).toBe("upstream_error");
    }
    expect(second.state.chats).toBe(secondBefore);
    first.state.mode = "ok";
    const firstBefore = first.state.chats;
    await served();
    expect(first.state.chats).toBe(firstBefore + 1);
  });

  it("answers no_healthy_upstream (503) while every server of the model is ejected, calling none", async () => {
    first.state.mode = "500";
    second.state.mode = "500";
    for (let i = 0; i < 2; i++) {
      const { error } = await h.chat(await h.chatRequest("demo-small"));
      expect(error!.code).toBe("upstream_error");
    }
    const calls = first.state.chats + second.state.chats;
    const request = await h.chatRequest("demo-small").catch((err: unknown) => err);
    // Routing already knows: the model is no_healthy_upstream, and `auto` (its first model
    // otherwise) passes over it.
    expect(request).toBeInstanceOf(AppError);
    expect((request as AppError).code).toBe("no_healthy_upstream");
    expect((await h.route("auto")).modelId).toBe("broken");

    // A route resolved before the ejection is refused at ChatCompletion time too.
    const late = await h.chatRequest("", {
      requestId: `req_${randomUUID()}`,
      leaseId: randomUUID(),
      accountId: randomUUID(),
      keyId: "key_1",
      route: Route.fromPartial({
        modelId: "demo-small",
        provider: "local",
        contextWindow: 8192n,
        maxOutputTokensCap: 4096n,
      }),
      body: Buffer.from(JSON.stringify({ model: "demo-small", messages: [{ role: "user", content: "hi" }] })),
      stream: true,
      maxOutputTokens: 100n,
      promptTokens: 20n,
    });
    const { error } = await h.chat(late);
    expect(error!.code).toBe("no_healthy_upstream");
    expect(first.state.chats + second.state.chats).toBe(calls);
    expect(await usageOf(h, late)).toMatchObject({ success: false, errorCode: "no_healthy_upstream" });
  });
});

describe("a model's only server, ejected", () => {
  let only: Replica;
  let h: Harness;
  beforeAll(async () => {
    only = await startReplica(UPSTREAM_TOKEN, ["ok"]);
    // A back-off far longer than the test: only the probes can bring the server back.
    h = await startRelayHarness({
      LOCAL_MODEL_URL: only.url,
      UPSTREAM_EJECT_AFTER_FAILURES: "2",
      UPSTREAM_EJECT_BACKOFF_MS: "600000",
    });
  });
  afterAll(async () => {
    await h?.close();
    await only?.close();
  });

  it("is probed while it is down and takes calls again within about a second of its return", async () => {
    only.state.mode = "down";
    for (let i = 0; i < 2; i++) {
      const { error } = await h.chat(await h.chatRequest("demo-small"));
      expect(error!.code).toBe("upstream_error");
    }
    // Ejected, and its probes keep failing: the model has no server.
    await new Promise((r) => setTimeout(r, 600));
    const refused = await h.chatRequest("demo-small").catch((err: unknown) => err);
    expect((refused as AppError).code).toBe("no_healthy_upstream");
    expect((refused as AppError).headers).toEqual({ "retry-after": "1" });
    const callsWhileDown = only.state.chats;

    only.state.mode = "ok";
    const back = Date.now();
    const request = await waitFor(
      () => h.chatRequest("demo-small").catch(() => undefined),
      (r) => r !== undefined,
      5_000,
    );
    expect(Date.now() - back).toBeLessThan(1_500);
    const { events, error } = await h.chat(request!);
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe(CONTENT.join(""));
    // The probes were GET /v1/models, never a chat call.
    expect(only.state.chats).toBe(callsWhileDown + 1);
  });
});

describe("outlier ejection of a hoster", () => {
  const MODEL = "m-1";
  let h: Harness;
  let healthOk = true;
  let chatMode: "500" | "ok" = "ok";
  let chats = 0;
  let hoster: Awaited<ReturnType<typeof startScriptedHoster>>;
  const token = `hoster-${randomUUID()}`;
  beforeAll(async () => {
    hoster = await startScriptedHoster((req, res) => {
      if (req.url === "/health") return jsonAnswer(res, healthOk ? 200 : 503, { status: "ok" });
      if (req.headers.authorization !== `Bearer ${token}`) return jsonAnswer(res, 401, {});
      if (req.url === "/v1/models") return jsonAnswer(res, 200, modelList([MODEL]));
      chats++;
      if (chatMode === "500") return jsonAnswer(res, 500, {});
      req.resume();
      req.on("end", () => void answer(res));
    });
    h = await startRelayHarness({
      // Probes fail quietly while the test wants them to (the hoster never turns unhealthy), and
      // ejection outlives the test: only a successful probe can end it.
      HOSTER_PROBE_INTERVAL_MS: "100",
      HOSTER_UNHEALTHY_AFTER: "1000",
      UPSTREAM_EJECT_AFTER_FAILURES: "2",
      UPSTREAM_EJECT_BACKOFF_MS: "600000",
    });
  });
  afterAll(async () => {
    await h?.close();
    await hoster?.close();
  });

  it("ejects a failing hoster (503 for its scoped keys) until a health probe succeeds", async () => {
    const { hoster: registered } = await h.client.registerHoster({
      name: "Ejected GPUs",
      email: "ejected@example.com",
      endpointUrl: hoster.url,
      apiKey: token,
      inviteCode: h.accounts.invite(),
      password: "a long enough password",
      clientIp: "203.0.113.9",
      models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
    });
    const scope: RouteScope = { subscriptionId: randomUUID(), productId: randomUUID(), hosterId: registered!.hosterId };
    const scopedRequest = async () => {
      const route = await h.route(MODEL, scope);
      return h.chatRequest("", {
        requestId: `req_${randomUUID()}`,
        leaseId: randomUUID(),
        accountId: randomUUID(),
        keyId: "key_scoped",
        route,
        body: Buffer.from(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] })),
        stream: true,
        maxOutputTokens: 100n,
        promptTokens: 20n,
      });
    };

    healthOk = false;
    chatMode = "500";
    // A probe that passed before the switch must not land after the ejection.
    await new Promise((r) => setTimeout(r, 250));
    const early = await scopedRequest();
    for (let i = 0; i < 2; i++) {
      const { error } = await h.chat(await scopedRequest());
      expect(error!.code).toBe("upstream_error");
    }
    expect(chats).toBe(2);
    // Ejected: routing and ChatCompletion both refuse, and the hoster gets no call, while its
    // probes keep failing.
    await new Promise((r) => setTimeout(r, 300));
    const refused = await scopedRequest().catch((err: unknown) => err);
    expect((refused as AppError).code).toBe("no_healthy_upstream");
    const { error } = await h.chat({ ...early, requestId: `req_${randomUUID()}`, leaseId: randomUUID() });
    expect(error!.code).toBe("no_healthy_upstream");
    expect(chats).toBe(2);
    expect((await h.client.getHoster({ hosterId: scope.hosterId })).hoster?.status).toBe("healthy");

    // Its server is fine again: the next successful probe brings it back.
    healthOk = true;
    chatMode = "ok";
    const back = await waitFor(
      () => scopedRequest().catch((err: unknown) => err),
      (r) => !(r instanceof Error),
      3_000,
    );
    expect(back).not.toBeInstanceOf(Error);
    const { events, error: none } = await h.chat(back as RelayRequest);
    expect(none).toBeUndefined();
    expect(textOf(events)).toBe(CONTENT.join(""));
    expect(chats).toBe(3);
  });
});
