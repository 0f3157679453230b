import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AppError } from "@mkt/runtime/errors";
import type { UsageCompleted } from "@mkt/proto/events/v1/events";
import { relayEmbeddings } from "../../src/relay/relay-embeddings.ts";
import type { RelayRequest } from "../../src/relay/relay-request.ts";
import { jsonAnswer, modelList } from "../../../services/registry/test/hoster-servers.ts";
import { startRelayHarness, UPSTREAM_TOKEN, waitFor, type RelayHarness } from "./relay-harness.ts";

// relayEmbeddings against two real replicas of a local embedding model whose behaviour each test
// switches: failover on a server's fault, answers checked before they reach the client, and one
// usage event (output 0) whatever the outcome.

type Mode = "ok" | "500" | "short" | "overreport";

async function startReplica() {
  const state = { mode: "ok" as Mode, calls: 0 };
  const server = createServer((req, res) => {
    let text = "";
    req.on("data", (piece: Buffer) => (text += piece.toString()));
    req.on("end", () => {
      if (req.url === "/health") return jsonAnswer(res, 200, { status: "ok" });
      if (req.url === "/v1/models") return jsonAnswer(res, 200, modelList(["embed-upstream"]));
      state.calls++;
      if (req.url !== "/v1/embeddings" || req.headers.authorization !== `Bearer ${UPSTREAM_TOKEN}`) {
        return jsonAnswer(res, 404, {});
      }
      if (state.mode === "500") return jsonAnswer(res, 500, { error: { message: "boom" } });
      const body = JSON.parse(text) as { model: string; input: string[] };
      const data = body.input.map((_, index) => ({ object: "embedding", index, embedding: [index, 1] }));
      jsonAnswer(res, 200, {
        object: "list",
        model: body.model,
        // Reversed: the relay puts them back in input order.
        data: state.mode === "short" ? data.slice(1) : data.reverse(),
        usage: { prompt_tokens: state.mode === "overreport" ? 1_000 : 3, total_tokens: 3 },
      });
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

type Replica = Awaited<ReturnType<typeof startReplica>>;

let first: Replica;
let second: Replica;
let h: RelayHarness;
beforeAll(async () => {
  [first, second] = await Promise.all([startReplica(), startReplica()]);
  h = await startRelayHarness({
    LOCAL_MODEL_URL: `${first.url},${second.url}`,
    UPSTREAM_EJECT_AFTER_FAILURES: "1000",
    LOCAL_MODELS: JSON.stringify([
      {
        model_id: "embed",
        kind: "embedding",
        context_window: 8192,
        input_price_per_1m_usd: "1",
        output_price_per_1m_usd: "0",
        upstream_model: "embed-upstream",
      },
    ]),
  });
});
afterAll(async () => {
  await h?.close();
  await Promise.all([first?.close(), second?.close()]);
});

async function request(): Promise<RelayRequest> {
  return h.chatRequest("embed", {
    route: await h.route("embed"),
    body: Buffer.from(JSON.stringify({ model: "embed", input: ["a", "b"] })),
    stream: false,
    maxOutputTokens: 0n,
    promptTokens: 5n,
    choices: 1n,
    // As admitted: 5 tokens at USD 1 per 1M (the cost is capped at it).
    worstCaseMicros: 5n,
    requestId: `req_${randomUUID()}`,
  });
}

const embed = (r: RelayRequest) =>
  relayEmbeddings(
    h.relay.deps,
    r,
    { inputs: 2, encodingFormat: "float" },
    { clientGone: new AbortController().signal, clientConnected: () => true },
  );

async function usageOf(r: RelayRequest): Promise<UsageCompleted> {
  const events = await waitFor(
    () => h.published.filter((e) => e.requestId === r.requestId),
    (found) => found.length > 0,
  );
  expect(events).toHaveLength(1);
  return events[0]!;
}

describe("relayEmbeddings", () => {
  it("answers in input order under the route's model name, billed the lower of report and count, output 0", async () => {
    first.state.mode = "ok";
    const r = await request();
    const answer = JSON.parse((await embed(r))!) as Record<string, unknown>;
    expect(answer).toMatchObject({
      object: "list",
      model: "embed",
      data: [
        { object: "embedding", index: 0, embedding: [0, 1] },
        { object: "embedding", index: 1, embedding: [1, 1] },
      ],
      usage: { prompt_tokens: 3, total_tokens: 3, cost: 0.000003 },
    });
    expect(await usageOf(r)).toMatchObject({ success: true, inputTokens: 3n, outputTokens: 0n, modelId: "embed" });
  });

  it("bills its own count when the server claims more", async () => {
    first.state.mode = "overreport";
    const r = await request();
    await embed(r);
    expect(await usageOf(r)).toMatchObject({ success: true, inputTokens: 5n, reportedInputTokens: 1000n });
  });

  it("moves to the next server on a server's fault: one answer, one usage event", async () => {
    first.state.mode = "500";
    second.state.mode = "ok";
    const before = second.state.calls;
    const r = await request();
    expect(await embed(r)).toBeDefined();
    expect(second.state.calls - before).toBe(1);
    expect((await usageOf(r)).success).toBe(true);
  });

  it("never passes on fewer vectors than inputs: 502 upstream_error, nothing billed", async () => {
    first.state.mode = "short";
    second.state.mode = "short";
    const r = await request();
    const err = await embed(r).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: "upstream_error" });
    expect(await usageOf(r)).toMatchObject({ success: false, errorCode: "upstream_error", inputTokens: 0n });
  });
});
