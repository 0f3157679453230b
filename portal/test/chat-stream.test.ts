import { describe, expect, it } from "vitest";
import { readChatStream } from "../src/lib/chat-stream.ts";

function streamOf(...pieces: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const piece of pieces) controller.enqueue(encoder.encode(piece));
      controller.close();
    },
  });
}

const chunk = (body: object) => `data: ${JSON.stringify(body)}\n\n`;

describe("readChatStream", () => {
  it("joins the deltas, even when an event is split across reads, and keeps the usage", async () => {
    const whole =
      chunk({ id: "chatcmpl-1", choices: [{ delta: { content: "Hel" } }] }) +
      chunk({ id: "chatcmpl-1", choices: [{ delta: { content: "lo" }, finish_reason: "stop" }] }) +
      chunk({ id: "chatcmpl-1", choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } }) +
      "data: [DONE]\n\n";
    const seen: string[] = [];
    const result = await readChatStream(streamOf(whole.slice(0, 17), whole.slice(17, 90), whole.slice(90)), (p) =>
      seen.push(p),
    );
    expect(seen).toEqual(["Hel", "lo"]);
    expect(result).toEqual({
      id: "chatcmpl-1",
      text: "Hello",
      finishReason: "stop",
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
  });

  it("throws the message of an error event sent after the first byte", async () => {
    const body = streamOf(
      chunk({ choices: [{ delta: { content: "par" } }] }),
      chunk({ choices: [{ delta: {}, finish_reason: "error" }], error: { message: "The upstream timed out." } }),
    );
    await expect(readChatStream(body, () => {})).rejects.toThrow("The upstream timed out.");
  });

  it("accepts CRLF line ends and ignores comments", async () => {
    const body = streamOf(
      ": keep-alive\r\n\r\n",
      `data: ${JSON.stringify({ choices: [{ delta: { content: "x" } }] })}\r\n\r\n`,
    );
    expect((await readChatStream(body, () => {})).text).toBe("x");
  });
});
