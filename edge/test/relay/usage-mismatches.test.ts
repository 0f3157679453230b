import type { IncomingMessage, ServerResponse } from "node:http";
import { HosterModel } from "@mkt/proto/registry/v1/registry";
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";
import { jsonAnswer, modelList, startScriptedHoster } from "../../../services/registry/test/hoster-servers.ts";

const MODEL = "scripted-7b";
const TOKEN = "scripted-hoster-token-1234";
const PIECES = ["The", " answer", " is", " forty", "-two", "."];
const PROMPT_TOKENS = 20;
const OUTPUT_TOKENS = countTextTokens(PIECES.join(""));

/** What a scripted hoster reports as usage after an answer it streamed in full. */
type Report = Record<string, unknown> | undefined;

/** An OpenAI-compatible hoster that streams PIECES, then the usage `report` (or none). */
function hosterAnswering(report: Report) {
  return (req: IncomingMessage, res: ServerResponse) => {
    if (req.url === "/health") return jsonAnswer(res, 200, { status: "ok" });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return jsonAnswer(res, 401, { error: { message: "no" } });
    if (req.url === "/v1/models") return jsonAnswer(res, 200, modelList([MODEL]));
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const base = { id: "chatcmpl-s", object: "chat.completion.chunk", created: 1_700_000_000, model: MODEL };
      const send = (chunk: object) => res.write(`data: ${JSON.stringify({ ...base, ...chunk })}\n\n`);
      send({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] });
      for (const piece of PIECES) send({ choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
      send({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] });
      if (report) send({ choices: [], usage: report });
      res.end("data: [DONE]\n\n");
    });
  };
}

const HOSTERS = {
  // Reports what the registry counted: never flagged.
  honest: { prompt_tokens: PROMPT_TOKENS, completion_tokens: OUTPUT_TOKENS },
  // Off by a few tokens (another tokenizer, template overhead): within the tolerance.
  close: { prompt_tokens: PROMPT_TOKENS + 4, completion_tokens: OUTPUT_TOKENS + 3 },
  // Sends no usage at all: billing uses the registry's count; not a mismatch.
  silent: undefined,
  // Claims ten times the output it streamed.
  inflating: { prompt_tokens: PROMPT_TOKENS, completion_tokens: OUTPUT_TOKENS * 10 },
  // Claims a much larger prompt than the edge counted.
  paddingPrompt: { prompt_tokens: PROMPT_TOKENS * 5, completion_tokens: OUTPUT_TOKENS },
  // Nonsense counts.
  negative: { prompt_tokens: -1, completion_tokens: -5 },
} satisfies Record<string, Report>;
type Name = keyof typeof HOSTERS;

let h: Harness;
const servers: Array<{ close(): Promise<void> }> = [];
const ids = {} as Record<Name, string>;

beforeAll(async () => {
  h = await startRelayHarness();
  let n = 0;
  for (const [name, report] of Object.entries(HOSTERS) as Array<[Name, Report]>) {
    const server = await startScriptedHoster(hosterAnswering(report));
    servers.push(server);
    const { hoster } = await h.client.registerHoster({
      name: `Hoster ${name}`,
      email: `mismatch${++n}@example.com`,
      endpointUrl: server.url,
      apiKey: TOKEN,
      inviteCode: h.accounts.invite(),
      password: "a long enough password",
      clientIp: "203.0.113.30",
      models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
    });
    ids[name] = hoster!.hosterId;
  }
});
afterAll(async () => {
  await h?.close();
  for (const server of servers) await server.close();
});

/** Runs one streamed chat completion on a hoster's model, as a scoped key of that hoster would. */
async function chatWith(name: Name): Promise<void> {
  const scope = { subscriptionId: randomUUID(), productId: randomUUID(), hosterId: ids[name] };
  const route = await h.route(MODEL, scope);
  const { events, error } = await h.chat(
    await h.chatRequest("", {
      requestId: `req_${randomUUID()}`,
      leaseId: randomUUID(),
      accountId: randomUUID(),
      keyId: "key_scoped",
      route,
      body: Buffer.from(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Question?" }] })),
      stream: true,
      maxOutputTokens: 100n,
      promptTokens: BigInt(PROMPT_TOKENS),
      receivedAtMs: BigInt(Date.now()),
    }),
  );
  expect(error).toBeUndefined();
  expect(events.length).toBeGreaterThan(0);
}

/** The value of each sample of a Prometheus text exposition, keyed by name and labels. */
function samplesOf(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

/** Scrapes registry's metrics listener (hosters' figures). */
async function scrape(): Promise<{ contentType: string; samples: Map<string, number> }> {
  const response = await fetch(`http://127.0.0.1:${h.registry.metricsPort}/metrics`);
  expect(response.status).toBe(200);
  return { contentType: response.headers.get("content-type") ?? "", samples: samplesOf(await response.text()) };
}

/** The relay's metrics (the edge's /metrics shows them). */
const scrapeRelay = async () => samplesOf(await h.metrics.metrics());

const mismatchSample = (name: Name) => `mkt_usage_mismatches_total{hoster_id="${ids[name]}"}`;

async function storedMismatches(name: Name): Promise<bigint> {
  const { hoster } = await h.client.getHoster({ hosterId: ids[name] });
  return hoster!.usageMismatches;
}

describe("hosters whose usage reports disagree with the edge's count", () => {
  it("are counted per hoster in the Prometheus counter and in GetHoster; honest ones are not", async () => {
    for (const name of Object.keys(HOSTERS) as Name[]) {
      await chatWith(name);
      await chatWith(name);
    }
    const flagged: Name[] = ["inflating", "paddingPrompt", "negative"];

    for (const name of flagged) {
      expect(
        await waitFor(
          () => storedMismatches(name),
          (n) => n === 2n,
        ),
      ).toBe(2n);
    }
    const { contentType, samples } = await scrape();
    expect(contentType).toMatch(/^text\/plain; version=0\.0\.4/);
    for (const name of flagged) expect(samples.get(mismatchSample(name))).toBe(2);
    for (const name of ["honest", "close", "silent"] as Name[]) {
      expect(samples.get(mismatchSample(name)) ?? 0).toBe(0);
      expect(await storedMismatches(name)).toBe(0n);
    }
    expect(samples.has("process_cpu_user_seconds_total")).toBe(true);
    // Every request relayed is counted by provider and outcome at the edge.
    const relayed = await scrapeRelay();
    expect(relayed.get('mkt_upstream_requests_total{provider="hoster",code="ok"}')).toBe(12);
    // Each of them had its upstream's time to first event observed.
    expect(relayed.get('mkt_upstream_first_event_seconds_count{provider="hoster"}')).toBe(12);
    expect(relayed.get('mkt_upstream_first_event_seconds_bucket{le="+Inf",provider="hoster"}')).toBe(12);
    expect(relayed.get('mkt_upstream_first_event_seconds_sum{provider="hoster"}')).toBeGreaterThan(0);
  });

  it("keep counting across requests", async () => {
    const before = await storedMismatches("inflating");
    await chatWith("inflating");
    expect(
      await waitFor(
        () => storedMismatches("inflating"),
        (n) => n === before + 1n,
      ),
    ).toBe(before + 1n);
    expect((await scrape()).samples.get(mismatchSample("inflating"))).toBe(Number(before + 1n));
  });

  it("counts failed upstream calls by their code, with no first event observed", async () => {
    const firstEvents = 'mkt_upstream_first_event_seconds_count{provider="local"}';
    const before = (await scrapeRelay()).get(firstEvents) ?? 0;
    const { error } = await h.chat(await h.chatRequest("broken"));
    expect(error).toBeDefined();
    const samples = await scrapeRelay();
    expect(samples.get('mkt_upstream_requests_total{provider="local",code="upstream_error"}')).toBe(1);
    expect(samples.get(firstEvents) ?? 0).toBe(before);
  });

  it("answers 404 for anything but GET /metrics", async () => {
    const response = await fetch(`http://127.0.0.1:${h.registry.metricsPort}/other`);
    expect(response.status).toBe(404);
  });
});
