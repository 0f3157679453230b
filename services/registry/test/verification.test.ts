import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countPromptTokens } from "@mkt/runtime/tokens";
import { HosterModel, ProductTerms } from "@mkt/proto/registry/v1/registry";
import { startHarness, type Harness } from "./registry-harness.ts";
import { jsonAnswer, modelList, startRealHoster, startScriptedHoster } from "./hoster-servers.ts";

// Registry's verification probes against real HTTP servers: the reference hoster server (honest)
// and servers that lie about usage, ignore max_tokens or return tool arguments that do not fit
// the tool's schema. Two failed runs make an endpoint degraded, a passing run restores it.

const MODEL = "probe-model";
const TOKEN = "probe-token-123456";

type Misbehaviour = "honest" | "lying_usage" | "ignores_cap" | "bad_tool_args";

/** A scripted OpenAI-compatible server whose behaviour the test sets (and may change). */
async function scriptedServer(state: { mode: Misbehaviour }) {
  const read = (req: IncomingMessage) =>
    new Promise<Record<string, unknown>>((resolve) => {
      let text = "";
      req.on("data", (c: Buffer) => (text += c.toString()));
      req.on("end", () => resolve(text ? (JSON.parse(text) as Record<string, unknown>) : {}));
    });
  return startScriptedHoster((req: IncomingMessage, res: ServerResponse) => {
    if (req.url === "/health") return jsonAnswer(res, 200, { status: "ok" });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return jsonAnswer(res, 401, { error: "no" });
    if (req.url === "/v1/models") return jsonAnswer(res, 200, modelList([MODEL]));
    void read(req).then((body) => {
      const messages = body.messages as Array<{ role: string; content: string }>;
      if (body.tools) {
        const args = state.mode === "bad_tool_args" ? '{"town": 7}' : '{"city": "Oslo"}';
        return jsonAnswer(res, 200, {
          choices: [
            {
              message: {
                role: "assistant",
                tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: args } }],
              },
              finish_reason: "tool_calls",
            },
          ],
        });
      }
      const words = state.mode === "ignores_cap" ? 200 : 10;
      const content = Array.from({ length: words }, () => "word").join(" ");
      const promptTokens = countPromptTokens(messages);
      const usage = {
        prompt_tokens: state.mode === "lying_usage" ? promptTokens * 2 : promptTokens,
        completion_tokens: words,
        total_tokens: promptTokens + words,
      };
      if (body.stream) {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content } }] })}\n\n`);
        res.write(`data: ${JSON.stringify({ choices: [], usage })}\n\n`);
        return res.end("data: [DONE]\n\n");
      }
      jsonAnswer(res, 200, { choices: [{ message: { role: "assistant", content }, finish_reason: "stop" }], usage });
    });
  });
}

let h: Harness;
const servers: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  for (const server of servers) await server.close();
  await h?.close();
});

/** Registers a server's model and sells it on an open payg plan (what verification probes). */
async function openEndpoint(
  name: string,
  url: string,
  token: string,
  modelId: string,
  terms: Partial<ProductTerms> = {},
): Promise<string> {
  const { hoster } = await h.client.registerHoster({
    name,
    email: `verify-${randomUUID()}@example.com`,
    endpointUrl: url,
    apiKey: token,
    inviteCode: h.accounts.invite(),
    password: "",
    clientIp: "203.0.113.9",
    models: [HosterModel.fromPartial({ modelId, contextWindow: 8192n })],
  });
  await h.client.createProduct({
    hosterId: hoster!.hosterId,
    terms: ProductTerms.fromPartial({
      name: "Open",
      pricingModel: "payg",
      inputPricePer1mMicros: 100_000n,
      outputPricePer1mMicros: 100_000n,
      open: true,
      ...terms,
    }),
  });
  return hoster!.hosterId;
}

const verdictOf = async (hosterId: string) => (await h.client.getHoster({ hosterId })).hoster!.models[0]!.verification!;
const failedChecks = async (hosterId: string) =>
  (await verdictOf(hosterId)).checks.filter((c) => !c.passed).map((c) => c.check);

describe("verification probes", () => {
  it("degrades a hoster that lies about usage, ignores max_tokens or sends bad tool arguments after two runs, never an honest one", async () => {
    const real = await startRealHoster({ models: [MODEL] });
    servers.push(real);
    const honest = await openEndpoint("Honest GPUs", real.url, real.token, MODEL);
    const states = {
      lying_usage: { mode: "lying_usage" as Misbehaviour },
      ignores_cap: { mode: "ignores_cap" as Misbehaviour },
      bad_tool_args: { mode: "bad_tool_args" as Misbehaviour },
    };
    const hosters: Record<string, string> = {};
    for (const [name, state] of Object.entries(states)) {
      const server = await scriptedServer(state);
      servers.push(server);
      hosters[name] = await openEndpoint(name, server.url, TOKEN, MODEL);
    }
    // A hoster with no open plan is not probed.
    const closedServer = await startRealHoster({ models: [MODEL] });
    servers.push(closedServer);
    const { hoster: closed } = await h.client.registerHoster({
      name: "Closed GPUs",
      email: `verify-${randomUUID()}@example.com`,
      endpointUrl: closedServer.url,
      apiKey: closedServer.token,
      inviteCode: h.accounts.invite(),
      password: "",
      clientIp: "203.0.113.9",
      models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
    });

    await h.registry.verifyNow();
    // One failed run is not enough.
    for (const id of Object.values(hosters)) expect((await verdictOf(id)).status).toBe("unverified");
    expect(await verdictOf(honest)).toMatchObject({ status: "verified" });
    await h.registry.verifyNow();

    expect(await verdictOf(honest)).toMatchObject({ status: "verified" });
    expect(await failedChecks(honest)).toEqual([]);
    expect((await verdictOf(honest)).checks.map((c) => c.check)).toEqual([
      "model_listed",
      "token_honesty",
      "output_cap",
      "tool_calls",
      "streaming_usage",
    ]);
    expect(await verdictOf(hosters.lying_usage!)).toMatchObject({ status: "degraded" });
    expect(await failedChecks(hosters.lying_usage!)).toEqual(["token_honesty"]);
    expect(await verdictOf(hosters.ignores_cap!)).toMatchObject({ status: "degraded" });
    expect(await failedChecks(hosters.ignores_cap!)).toContain("output_cap");
    expect(await verdictOf(hosters.bad_tool_args!)).toMatchObject({ status: "degraded" });
    expect(await failedChecks(hosters.bad_tool_args!)).toEqual(["tool_calls"]);
    expect((await verdictOf(closed!.hosterId)).status).toBe("unverified");
    // What failed is said in words safe to show, and the public list shows it as well.
    const detail = (await verdictOf(hosters.lying_usage!)).checks.find((c) => c.check === "token_honesty")!.detail;
    expect(detail).toMatch(/^reported \d+ prompt tokens; the gateway counts \d+$/);
    const listed = (await h.client.listHosters({})).hosters.find((x) => x.hosterId === hosters.lying_usage)!;
    expect(listed.models[0]!.verification!.status).toBe("degraded");
    const { endpoints } = await h.client.listEndpoints({ canonicalId: MODEL });
    const degraded = endpoints.filter((e) => e.model!.verification!.status === "degraded").map((e) => e.hosterId);
    expect(degraded.sort()).toEqual(Object.values(hosters).sort());

    // Fixed, one passing run restores it.
    states.lying_usage.mode = "honest";
    await h.registry.verifyNow();
    expect(await verdictOf(hosters.lying_usage!)).toMatchObject({ status: "verified" });
    // Probes count toward the endpoint's live figures (one counted call per run).
    const stats = (await h.client.getHoster({ hosterId: honest })).hoster!.models[0]!.stats!;
    expect(stats.last30m!.requests).toBe(3n);
    expect(stats.last30m!.uptime).toBe(1);
  });
});

describe("cache honesty", () => {
  it("checks a discounted endpoint's repeated prompt for cached tokens: shown when none are reported, never degrading it", async () => {
    // A tenth of the input price for cached tokens.
    const discount = { cachedInputPricePer1mMicros: 10_000n };
    const real = await startRealHoster({ models: [MODEL] });
    servers.push(real);
    const caching = await openEndpoint("Caching GPUs", real.url, real.token, MODEL, discount);
    const forgetful = await scriptedServer({ mode: "honest" });
    servers.push(forgetful);
    const noCache = await openEndpoint("Forgetful GPUs", forgetful.url, TOKEN, MODEL, discount);
    // The same scripted server with no discount (its cached price is its input price) is not asked.
    const plain = await scriptedServer({ mode: "honest" });
    servers.push(plain);
    const undiscounted = await openEndpoint("Plain GPUs", plain.url, TOKEN, MODEL, {
      cachedInputPricePer1mMicros: 100_000n,
    });

    await h.registry.verifyNow();
    await h.registry.verifyNow();

    const cacheCheck = async (hosterId: string) =>
      (await verdictOf(hosterId)).checks.find((c) => c.check === "cache_discount");
    expect(await verdictOf(caching)).toMatchObject({ status: "verified" });
    expect(await cacheCheck(caching)).toMatchObject({ passed: true, held: false });
    expect((await cacheCheck(caching))!.detail).toMatch(/^the same prompt sent twice reported \d+ cached tokens$/);

    // Two runs without a cached token: flagged, and still verified (the customer paid the fresh price).
    expect(await verdictOf(noCache)).toMatchObject({ status: "verified" });
    expect(await cacheCheck(noCache)).toEqual({
      check: "cache_discount",
      passed: false,
      held: false,
      detail: "cache discount not given: the same prompt sent twice reported no cached tokens",
    });
    // Shown where the other checks are: the hoster's own view, the hoster list and the endpoints list.
    const listed = (await h.client.listHosters({})).hosters.find((x) => x.hosterId === noCache)!;
    expect(listed.models[0]!.verification!.checks.map((c) => c.check)).toContain("cache_discount");
    const { endpoints } = await h.client.listEndpoints({ canonicalId: MODEL });
    const shown = endpoints.find((e) => e.hosterId === noCache)!.model!.verification!;
    expect(shown.checks.find((c) => c.check === "cache_discount")!.passed).toBe(false);

    expect(await cacheCheck(undiscounted)).toBeUndefined();
    const chats = (server: typeof plain) => server.requests.filter((r) => r.path === "/v1/chat/completions").length;
    // Per run: the counted call, the tool call and the streamed one; a discounted endpoint two more.
    expect(chats(plain)).toBe(6);
    expect(chats(forgetful)).toBe(10);
  });
});
