/**
 * A subscription's slot goes back when its call ends, not when the relay is done making the call's
 * usage durable (edge/src/chat/chat-call.ts): before the answer's last bytes reach the client,
 * and as soon as a client leaves. Otherwise a client with `max_concurrent` 1 that sends its next
 * request on reading the answer, or after giving up on one, is refused 429 for a limit it never
 * passed — for as long as NATS takes to ack (here: paused, so the relay waits for the publish
 * timeout and billing's RecordUsage).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPrivateNatsServer, type PrivateNatsServer } from "@mkt/testkit/nats-server";
import { pidListeningOn } from "../chaos/process-signals.ts";
import { postChat } from "../e2e/billing-db.ts";
import { registerHoster, subscribeToFreePlan, type RegisteredHoster } from "../e2e/hoster-fixture.ts";
import { startSystem, type RunningSystem } from "../e2e/system.ts";

const ROOMY_TIER = JSON.stringify({ free: { limit_per_minute: 100_000, limit_per_day: 10_000_000 } });

let nats: PrivateNatsServer;
let system: RunningSystem;
let hoster: RegisteredHoster;

beforeAll(async () => {
  nats = await startPrivateNatsServer();
  system = await startSystem({ natsUrl: nats.url, billing: { TIERS: ROOMY_TIER } });
  // 20 tokens a second: a 40-token answer streams for two seconds, long enough to leave it.
  hoster = await registerHoster(system, { serverEnv: { DEMO_TOKENS_PER_SECOND: "20" } });
}, 60_000);

afterAll(async () => {
  await hoster?.server.close();
  await system?.close();
  await nats?.close();
});

/** A subscriber whose plan allows one call at a time and nothing else near a limit. */
async function oneSlot() {
  const { scopedKey } = await subscribeToFreePlan(system, hoster, {
    rpmLimit: 100_000,
    tpmLimit: 100_000_000,
    maxConcurrent: 1,
  });
  return scopedKey;
}

const ask = (content: string, extra: Record<string, unknown> = {}) => ({
  model: hoster.modelId,
  max_tokens: 2,
  messages: [{ role: "user", content }],
  ...extra,
});

describe("a subscriber's only slot", () => {
  it("is free again when the client has read the answer, streamed or not", async () => {
    const key = await oneSlot();
    const statuses: string[] = [];
    // Back to back, no pause: each request is sent the moment the previous answer was read.
    for (let i = 0; i < 30; i++) {
      const res = await postChat(system.url, key, ask(`turn ${i}`, i % 2 ? { stream: true } : {}));
      const text = await res.text();
      if (res.status !== 200) statuses.push(`${i}: ${res.status} ${text}`);
    }
    expect(statuses).toEqual([]);
  }, 60_000);

  it("is free again at once when the client leaves mid-answer, while the call's usage waits on a paused NATS", async () => {
    const key = await oneSlot();
    const natsPid = pidListeningOn(nats.port);
    expect(natsPid).toBeDefined();
    process.kill(natsPid!, "SIGSTOP");
    try {
      const leaving = new AbortController();
      const res = await postChat(
        system.url,
        key,
        ask("a long story", { max_tokens: 40, stream: true }),
        leaving.signal,
      );
      expect(res.status).toBe(200);
      // The first chunk, then the client gives up.
      const reader = res.body!.getReader();
      await reader.read();
      leaving.abort();
      await reader.cancel().catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 200));
      const next = await postChat(system.url, key, ask("again"));
      expect(next.status, await next.text()).toBe(200);
    } finally {
      process.kill(natsPid!, "SIGCONT");
    }
  }, 60_000);
});
