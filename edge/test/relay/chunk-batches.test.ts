import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startScriptedHoster } from "../../../services/registry/test/hoster-servers.ts";
import { eventJson, startRelayHarness, type RelayHarness as Harness } from "./relay-harness.ts";

const PIECES = ["One", " two", " three", " four", " five"];

/** Writes a whole streamed answer at once, as an upstream the relay fell behind looks. */
let upstream: Awaited<ReturnType<typeof startScriptedHoster>>;
let h: Harness;
beforeAll(async () => {
  upstream = await startScriptedHoster((req, res) => {
    req.resume();
    req.on("end", () => {
      const base = { id: "chatcmpl-b1", object: "chat.completion.chunk", created: 1_700_000_000, model: "batchy" };
      const frame = (delta: object, finish: string | null = null) =>
        `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(
        frame({ role: "assistant", content: "" }) +
          PIECES.map((piece) => frame({ content: piece })).join("") +
          frame({}, "stop") +
          "data: [DONE]\n\n",
      );
    });
  });
  h = await startRelayHarness({
    LOCAL_MODEL_URL: upstream.url,
    LOCAL_MODELS: JSON.stringify([
      {
        model_id: "batchy",
        context_window: 8192,
        input_price_per_1m_usd: "0.50",
        output_price_per_1m_usd: "1.50",
        upstream_model: "batchy",
      },
    ]),
  });
});
afterAll(async () => {
  await h?.close();
  await upstream?.close();
});

describe("ChatCompletion relays chunks that arrive together as one message", () => {
  it("sends the chunks of one upstream read in one gRPC message, in order and unchanged", async () => {
    const { events, messages, error } = await h.chat(await h.chatRequest("batchy"));
    expect(error).toBeUndefined();
    const chunks = events.map(eventJson) as Array<{ choices: Array<{ delta: { content?: string } }> }>;
    expect(chunks).toHaveLength(PIECES.length + 2);
    expect(chunks.map((c) => c.choices[0]!.delta.content ?? "").join("")).toBe(PIECES.join(""));
    // One body, one read: far fewer messages than chunks.
    expect(messages).toBeLessThan(chunks.length);
  });
});
