import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import { relayAnswer } from "../../src/relay/relay-answer.ts";
import { CONTENT, startRelayHarness, waitFor, type RelayHarness as Harness } from "./relay-harness.ts";

// A whole answer's last bytes (the end of a stream, the body of a non-streamed answer) are written
// only once its usage event is durable, so no client holds an answer whose usage could be lost; a
// client gone before them is `client_cancelled`, billed what was relayed, exactly as a client abort.

const DELIVERED = BigInt(countTextTokens(CONTENT.join("")));

let h: Harness;
beforeAll(async () => {
  h = await startRelayHarness();
});
afterAll(async () => {
  await h?.close();
});

const usageOf = (requestId: string) =>
  waitFor(
    () => h.published.filter((e) => e.requestId === requestId),
    (events) => events.length > 0,
  ).then((events) => {
    expect(events).toHaveLength(1);
    return events[0]!;
  });

describe("an answer is a success once its last bytes may reach its client", () => {
  for (const stream of [true, false]) {
    it(`stream ${stream}: whole → success, billed what was delivered`, async () => {
      const request = await h.chatRequest("Demo Small", { stream });
      const { whole, error } = await h.chat(request);
      expect(error).toBeUndefined();
      expect(whole).toBe(true);
      expect(await usageOf(request.requestId)).toMatchObject({ success: true, errorCode: "", outputTokens: DELIVERED });
    });

    it(`stream ${stream}: the client gone before the last bytes → client_cancelled, billed what was relayed`, async () => {
      const request = await h.chatRequest("Demo Small", { stream });
      const { whole } = await h.chat(request, undefined, { clientGoneAtEnd: true });
      expect(whole).toBe(false);
      expect(await usageOf(request.requestId)).toMatchObject({
        success: false,
        errorCode: "client_cancelled",
        // A streamed answer's chunks reached the client; a non-streamed one had nothing yet.
        outputTokens: stream ? DELIVERED : 0n,
      });
    });
  }

  it("the end of a stream comes only once JetStream holds its usage event", async () => {
    const request = await h.chatRequest("Demo Small");
    const answer = relayAnswer(h.relay.deps, request, {
      clientGone: new AbortController().signal,
      clientConnected: () => true,
    });
    for await (const event of answer) {
      if (!("end" in event)) continue;
      // Read from the stream itself, not the subscription: durable, not merely sent.
      expect(await h.storedEvents(request.requestId)).toEqual([
        expect.objectContaining({ success: true, outputTokens: DELIVERED }),
      ]);
    }
  });
});
