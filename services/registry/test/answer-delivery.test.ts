import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTextTokens } from "@mkt/runtime/tokens";
import type { ChatCompletionResponse } from "@mkt/proto/registry/v1/registry";
import { CONTENT, startHarness, waitFor, type Harness } from "./registry-harness.ts";

// A whole answer is a success only once the caller (the edge) half-closes the call, its word that
// the answer reached its client; a caller that cancels or is lost before is `client_cancelled`,
// billed what was sent, exactly as a client abort (docs/decisions.md, "Answers that did not reach
// their client whole").

const DELIVERED = BigInt(countTextTokens(CONTENT.join("")));

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
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

describe("an answer is recorded a success once the caller confirms it reached its client", () => {
  for (const stream of [true, false]) {
    it(`stream ${stream}: half-closed after the end event → success, billed what was delivered`, async () => {
      const request = await h.chatRequest("Demo Small", { stream });
      const { whole, error } = await h.chat(request);
      expect(error).toBeUndefined();
      expect(whole).toBe(true);
      expect(await usageOf(request.requestId)).toMatchObject({ success: true, errorCode: "", outputTokens: DELIVERED });
    });

    it(`stream ${stream}: cancelled after the end event, before its half-close → client_cancelled, billed what was sent`, async () => {
      const request = await h.chatRequest("Demo Small", { stream });
      const { whole, cancelled } = await h.chat(request, undefined, { afterEnd: "cancel" });
      expect(whole).toBe(true);
      expect(cancelled).toBe(true);
      expect(await usageOf(request.requestId)).toMatchObject({
        success: false,
        errorCode: "client_cancelled",
        outputTokens: DELIVERED,
      });
    });
  }

  it("records nothing while the caller holds the answer unconfirmed, and the success once it half-closes", async () => {
    const request = await h.chatRequest("Demo Small");
    const call = h.streamClient.chatCompletion();
    const ended = new Promise<void>((resolve) =>
      call.on("data", (event: ChatCompletionResponse) => {
        if (event.end) resolve();
      }),
    );
    const status = new Promise((resolve) => call.on("status", resolve));
    call.write(request);
    await ended;
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(h.published.filter((e) => e.requestId === request.requestId)).toEqual([]);
    call.end();
    await status;
    expect(await usageOf(request.requestId)).toMatchObject({ success: true, outputTokens: DELIVERED });
  });

  it("refuses a call half-closed before its request", async () => {
    const call = h.streamClient.chatCompletion();
    const failed = new Promise<{ details: string }>((resolve) => call.on("error", resolve));
    call.on("data", () => undefined);
    call.end();
    expect((await failed).details).toBe("The call ended before its request.");
  });
});
