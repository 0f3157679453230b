import { randomUUID } from "node:crypto";
import { HosterModel } from "@mkt/proto/registry/v1/registry";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import type { HarnessEvent } from "./relay-harness.ts";
import { eventJson, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";
import {
  answerText,
  startWordCountingHoster,
  type WordCounterBehaviour,
  type WordCountingHoster,
} from "../../../services/registry/test/fixtures/word-counting-hoster.ts";

// Hosters whose model counts one token per word, so its count of an answer is well below ours
// (docs/adr/0022-runaway-guard-not-a-cap.md): the upstream judges max_tokens, the relay only guards
// against runaways.

const MODEL = "wordy-1b";
const PROMPT_TOKENS = 20n; // the edge's count
const BEHAVIOURS: WordCounterBehaviour[] = ["honest", "runaway", "inflating", "over-cap"];
/** The runaway guard's default limit per choice: 1.5 × cap + 32, by our count. */
const guard = (cap: number) => Math.floor(cap * 1.5) + 32;

let h: Harness;
const servers = {} as Record<WordCounterBehaviour, WordCountingHoster>;
const ids = {} as Record<WordCounterBehaviour, string>;

beforeAll(async () => {
  h = await startRelayHarness();
  let n = 0;
  for (const behaviour of BEHAVIOURS) {
    const server = await startWordCountingHoster({ behaviour, models: [MODEL] });
    servers[behaviour] = server;
    const { hoster } = await h.client.registerHoster({
      name: `Words ${behaviour}`,
      email: `words${++n}-${randomUUID()}@example.com`,
      endpointUrl: server.url,
      apiKey: server.token,
      inviteCode: h.accounts.invite(),
      password: "a long enough password",
      clientIp: "203.0.113.40",
      models: [HosterModel.fromPartial({ modelId: MODEL, contextWindow: 8192n })],
    });
    ids[behaviour] = hoster!.hosterId;
  }
});
afterAll(async () => {
  await h?.close();
  for (const server of Object.values(servers)) await server.close();
});

/** One chat completion on a hoster's model, as a scoped key of that hoster would make it. */
async function chatWith(
  behaviour: WordCounterBehaviour,
  options: { maxTokens: bigint; stream: boolean },
): Promise<{ request: RelayRequest; events: HarnessEvent[] }> {
  const scope = { subscriptionId: randomUUID(), productId: randomUUID(), hosterId: ids[behaviour] };
  const route = await h.route(MODEL, scope);
  const request = await h.chatRequest("", {
    requestId: `req_${randomUUID()}`,
    leaseId: randomUUID(),
    accountId: randomUUID(),
    keyId: "key_scoped",
    route,
    body: Buffer.from(JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Six words, please." }] })),
    stream: options.stream,
    includeUsage: options.stream,
    maxOutputTokens: options.maxTokens,
    promptTokens: PROMPT_TOKENS,
    receivedAtMs: BigInt(Date.now()),
  });
  const { events, error } = await h.chat(request);
  expect(error).toBeUndefined();
  expect(events.every((e) => !e.error)).toBe(true);
  return { request, events };
}

/** What the caller received: its text, finish reasons and usage, streamed or not. */
function answerOf(events: HarnessEvent[]) {
  const json = events.map(eventJson);
  const completion = events[0]?.completion ? json[0] : undefined;
  if (completion) {
    const choices = completion.choices as Array<{ message: { content: string }; finish_reason: string }>;
    return {
      text: choices.map((c) => c.message.content).join(""),
      finishes: choices.map((c) => c.finish_reason),
      usage: completion.usage as { prompt_tokens: number; completion_tokens: number },
    };
  }
  const choices = json.flatMap(
    (c) => c.choices as Array<{ delta: { content?: string }; finish_reason: string | null }>,
  );
  return {
    text: choices.map((c) => c.delta.content ?? "").join(""),
    finishes: choices.map((c) => c.finish_reason).filter((f) => f !== null),
    usage: json.at(-1)!.usage as { prompt_tokens: number; completion_tokens: number },
  };
}

async function usageEvent(request: RelayRequest) {
  const found = await waitFor(
    () => h.published.filter((e) => e.requestId === request.requestId),
    (events) => events.length > 0,
  );
  expect(found).toHaveLength(1);
  return found[0]!;
}

async function storedMismatches(behaviour: WordCounterBehaviour): Promise<bigint> {
  const { hoster } = await h.client.getHoster({ hosterId: ids[behaviour] });
  return hoster!.usageMismatches;
}

/** The relay's Prometheus samples (the edge's /metrics), keyed by name and labels. */
async function scrape(): Promise<Map<string, number>> {
  const text = await h.metrics.metrics();
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    samples.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return samples;
}

const runaways = (samples: Map<string, number>, behaviour: WordCounterBehaviour) =>
  samples.get(`mkt_output_runaways_total{provider="hoster",hoster_id="${ids[behaviour]}"}`) ?? 0;

/** Registry writes mismatches as it reads the usage events: long enough for a flag to land. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 400));

describe("a hoster whose model counts one token per word", () => {
  it.each([
    // Six words fill max_tokens 6 by its count: it stops there on its own ("stop").
    { stream: true, maxTokens: 6, words: 6, finish: "stop" },
    { stream: false, maxTokens: 6, words: 6, finish: "stop" },
    // max_tokens 4 cuts its six-word answer at four words: its own "length".
    { stream: true, maxTokens: 4, words: 4, finish: "length" },
    { stream: false, maxTokens: 4, words: 4, finish: "length" },
  ])("answers whole (stream $stream, max_tokens $maxTokens) with its own finish_reason", async (c) => {
    const { request, events } = await chatWith("honest", { maxTokens: BigInt(c.maxTokens), stream: c.stream });
    const answer = answerOf(events);
    // By our count the answer is far past max_tokens: a cut at the cap would have lost its end.
    expect(countTextTokens(answer.text)).toBeGreaterThan(2 * c.maxTokens);
    expect(answer.text).toBe(answerText(c.words));
    expect(answer.finishes).toEqual([c.finish]);
    expect(servers.honest.calls.at(-1)!.body.max_tokens).toBe(c.maxTokens);
    // Billed its own count (one per word), the lowest of reported, delivered and cap.
    expect(answer.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: c.words });
    expect(await usageEvent(request)).toMatchObject({
      success: true,
      inputTokens: 3n,
      outputTokens: BigInt(c.words),
    });
  });

  it("is never flagged for counting below us, and no runaway is counted against it", async () => {
    await settle();
    expect(await storedMismatches("honest")).toBe(0n);
    const samples = await scrape();
    expect(samples.get(`mkt_usage_mismatches_total{hoster_id="${ids.honest}"}`) ?? 0).toBe(0);
    expect(runaways(samples, "honest")).toBe(0);
  });
});

describe("an upstream that ignores max_tokens and never stops", () => {
  it.each([true, false])(
    "is cut at the tolerance (stream %s), finish_reason length, billed the cap",
    async (stream) => {
      const before = runaways(await scrape(), "runaway");
      const { request, events } = await chatWith("runaway", { maxTokens: 4n, stream });
      const answer = answerOf(events);
      expect(countTextTokens(answer.text)).toBe(guard(4));
      expect(answerText(100).startsWith(answer.text)).toBe(true);
      expect(answer.finishes).toEqual(["length"]);
      expect(answer.usage.completion_tokens).toBe(4);
      // No report reached us (the connection was closed before it): input is the edge's count.
      expect(await usageEvent(request)).toMatchObject({ success: true, inputTokens: PROMPT_TOKENS, outputTokens: 4n });
      const call = servers.runaway.calls.at(-1)!;
      await waitFor(
        () => call.closedEarly,
        (closed) => closed,
      );
      expect(call.closedEarly).toBe(true);
      expect(runaways(await scrape(), "runaway")).toBe(before + 1);
      expect(h.logLines.some((l) => l.includes(request.requestId) && l.includes("runaway guard"))).toBe(true);
    },
  );

  it("is not a usage mismatch: the overrun is what the runaway counter shows", async () => {
    await settle();
    expect(await storedMismatches("runaway")).toBe(0n);
  });
});

describe("an upstream that reports more than it delivered, or more than the cap", () => {
  it("claiming ten times the words it sent: billed what was delivered, flagged", async () => {
    const before = await storedMismatches("inflating");
    const { request, events } = await chatWith("inflating", { maxTokens: 100n, stream: true });
    const answer = answerOf(events);
    expect(answer.text).toBe(answerText(6));
    expect(answer.finishes).toEqual(["stop"]);
    const delivered = BigInt(countTextTokens(answerText(6)));
    expect(delivered).toBeLessThan(60n);
    expect(await usageEvent(request)).toMatchObject({ success: true, outputTokens: delivered });
    expect(
      await waitFor(
        () => storedMismatches("inflating"),
        (n) => n === before + 1n,
      ),
    ).toBe(before + 1n);
  });

  it("writing and reporting six words for max_tokens 2: relayed whole (within the tolerance), billed the cap, flagged", async () => {
    const before = await storedMismatches("over-cap");
    const { request, events } = await chatWith("over-cap", { maxTokens: 2n, stream: false });
    const answer = answerOf(events);
    expect(answer.text).toBe(answerText(6));
    expect(answer.finishes).toEqual(["stop"]);
    expect(answer.usage.completion_tokens).toBe(2);
    expect(await usageEvent(request)).toMatchObject({ success: true, outputTokens: 2n });
    expect(
      await waitFor(
        () => storedMismatches("over-cap"),
        (n) => n === before + 1n,
      ),
    ).toBe(before + 1n);
    expect(runaways(await scrape(), "over-cap")).toBe(0);
  });
});
