import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { Registry } from "prom-client";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { createLogger } from "@mkt/runtime/logger";
import { connectNats, ensureUsageStream, eventNames, type NatsConnection } from "@mkt/runtime/nats";
import { freshEventsPrefix } from "@mkt/testkit/env";
import { startPrivateNatsServer, type PrivateNatsServer } from "@mkt/testkit/nats-server";
import { createRelayMetrics } from "../../src/relay/relay-metrics.ts";
import { UsagePublisher } from "../../src/relay/usage-publisher.ts";
import { decodeUsageEvent, usageItems } from "@mkt/runtime/usage-messages";

// The edge's usage publisher against a nats-server of this file's own, stopped and started at
// will: group commits, billing's RecordUsage when JetStream does not ack, and events held in
// memory (and published later) when neither takes them.

const log = createLogger("usage-publisher-test", "silent");
const names = eventNames(freshEventsPrefix());
let nats: PrivateNatsServer;
let nc: NatsConnection;

beforeAll(async () => {
  nats = await startPrivateNatsServer();
  nc = await connectNats(nats.url, "usage-publisher-test", log);
  await ensureUsageStream(nc, names);
});
afterAll(async () => {
  await nc?.close();
  await nats?.close();
});

const event = () =>
  UsageCompleted.fromPartial({ requestId: `req_${randomUUID()}`, accountId: randomUUID(), success: true });

function publisher(recordUsage?: (events: UsageCompleted[]) => Promise<void>, durableTimeoutMs = 2_000) {
  const registry = new Registry();
  const metrics = createRelayMetrics(registry);
  const usage = new UsagePublisher({
    nc,
    subject: names.usageCompleted,
    edgeId: "edge-test",
    ackTimeoutMs: 300,
    durableTimeoutMs,
    recordUsage,
    metrics,
    log,
  });
  return { usage, registry };
}

/** What the stream holds: each message's id and the request ids of its events. */
async function storedBatches(): Promise<Array<{ id: string; requestIds: string[] }>> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(names.usageStream);
  const batches: Array<{ id: string; requestIds: string[] }> = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const msg = await jsm.streams.getMessage(names.usageStream, { seq }).catch(() => null);
    if (!msg) continue;
    const items = usageItems(msg.data, msg.header);
    batches.push({
      id: msg.header.get("Nats-Msg-Id"),
      requestIds: items.map((item) => decodeUsageEvent(item.data).requestId),
    });
  }
  return batches;
}

async function storedIds(): Promise<Set<string>> {
  return new Set((await storedBatches()).flatMap((batch) => batch.requestIds));
}

describe("the edge's usage publisher", () => {
  it("publishes the events that end while a publish is in flight as the next batch, one message each", async () => {
    const { usage, registry } = publisher();
    const first = event();
    const firstDurable = usage.publish(first);
    // Handed over in later turns while the first batch's publish awaits its ack.
    await new Promise((resolve) => setImmediate(resolve));
    const rest = Array.from({ length: 10 }, event);
    await Promise.all([firstDurable, ...rest.map((e) => usage.publish(e))]);
    const batches = (await storedBatches()).filter((batch) =>
      batch.requestIds.some((id) => id === first.requestId || rest.some((e) => e.requestId === id)),
    );
    expect(batches.map((batch) => batch.requestIds)).toEqual([[first.requestId], rest.map((e) => e.requestId)]);
    const [one, two] = batches.map((batch) => batch.id.split("."));
    expect(one!.slice(0, 2)).toEqual(two!.slice(0, 2));
    expect(BigInt(two![2]!)).toBe(BigInt(one![2]!) + 1n);
    expect(await registry.metrics()).toMatch(/mkt_usage_publish_group_size_sum 11\n/);
    await usage.close();
  });

  it("publishes the events handed over in one turn as one group, each durable when its promise settles", async () => {
    const { usage, registry } = publisher();
    const events = Array.from({ length: 25 }, event);
    await Promise.all(events.map((e) => usage.publish(e)));
    const stored = await storedIds();
    expect(events.every((e) => stored.has(e.requestId))).toBe(true);
    const text = await registry.metrics();
    expect(text).toMatch(/mkt_usage_publish_group_size_count 1\n/);
    expect(text).toMatch(/mkt_usage_publish_group_size_sum 25\n/);
    expect(text).toMatch(/mkt_usage_durable_seconds_count\{via="jetstream"\} 25\n/);
    expect(usage.pending).toBe(0);
    await usage.close();
  });

  it("hands the events JetStream did not ack to billing's RecordUsage, in one call, within one ack timeout", async () => {
    const recorded: UsageCompleted[][] = [];
    const { usage, registry } = publisher(async (events) => void recorded.push(events));
    await nats.stop();
    try {
      const events = Array.from({ length: 3 }, event);
      const started = Date.now();
      await Promise.all(events.map((e) => usage.publish(e)));
      // One ack timeout, then billing: well within the durability bound.
      expect(Date.now() - started).toBeLessThan(1_500);
      expect(recorded).toHaveLength(1);
      expect(recorded[0]!.map((e) => e.requestId).sort()).toEqual(events.map((e) => e.requestId).sort());
      expect(usage.pending).toBe(0);
      const text = await registry.metrics();
      expect(text).toMatch(/mkt_usage_record_fallbacks_total 3\n/);
    } finally {
      await nats.start();
    }
    await usage.close();
  });

  it("holds events neither JetStream nor billing takes, ends the wait at USAGE_DURABLE_TIMEOUT_MS, and publishes them once NATS is back", async () => {
    const failing = async () => {
      throw new Error("billing unreachable");
    };
    const { usage, registry } = publisher(failing, 800);
    await nats.stop();
    const events = Array.from({ length: 2 }, event);
    try {
      const started = Date.now();
      await Promise.all(events.map((e) => usage.publish(e)));
      const waited = Date.now() - started;
      expect(waited).toBeGreaterThanOrEqual(700);
      expect(waited).toBeLessThan(2_000);
      expect(usage.pending).toBe(2);
      const text = await registry.metrics();
      expect(text).toMatch(/mkt_usage_pending_events 2\n/);
      expect(text).toMatch(/mkt_usage_durable_timeouts_total 2\n/);
    } finally {
      await nats.start();
    }
    const deadline = Date.now() + 10_000;
    while (usage.pending > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
    expect(usage.pending).toBe(0);
    // Held as one batch and published as it was made: one message, never regrouped.
    const held = (await storedBatches()).filter((batch) => events.some((e) => batch.requestIds.includes(e.requestId)));
    expect(held.map((batch) => batch.requestIds)).toEqual([events.map((e) => e.requestId)]);
    expect(await registry.metrics()).toMatch(/mkt_usage_pending_events 0\n/);
    expect(await usage.close()).toBe(0);
  });
});
