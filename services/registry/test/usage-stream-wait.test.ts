import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import { afterAll, beforeAll, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { pino } from "pino";
import { ensureUsageStream, eventNames } from "@mkt/runtime/nats";
import { freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { startHosterUsageConsumer } from "../src/hosters/hoster-usage-consumer.ts";
import { createRegistryMetrics } from "../src/metrics/registry-metrics.ts";

// Billing owns the usage stream (its replicas): a registry started before it neither creates the
// stream nor fails; it waits, then reads once billing made it.

const names = eventNames(freshEventsPrefix());
const logLines: string[] = [];
const log = pino(
  { level: "info" },
  new Writable({
    write(line, _enc, done) {
      logLines.push(String(line));
      done();
    },
  }),
);
let nc: NatsConnection;

beforeAll(async () => {
  nc = await connect({ servers: TEST_NATS_URL });
});

afterAll(async () => {
  await (await jetstreamManager(nc)).streams.delete(names.usageStream).catch(() => undefined);
  await nc.close();
});

const streamExists = async () =>
  (await jetstreamManager(nc)).streams.info(names.usageStream).then(
    () => true,
    () => false,
  );

it("waits for billing's stream without creating it, then counts the events published once it exists", async () => {
  const written: Array<ReadonlyMap<string, number>> = [];
  const consumer = await startHosterUsageConsumer(
    nc,
    names,
    {
      store: { addUsageMismatches: async (counts) => void written.push(counts) },
      minutes: { add: async () => undefined, prune: async () => undefined },
      transaction: (work) => work(),
      deadLetters: async () => undefined,
      clock: () => new Date(),
    },
    createRegistryMetrics().usageMismatches,
    log,
  );
  let ready = false;
  void consumer.ready.then(() => (ready = true));
  try {
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(await streamExists(), "registry created the stream").toBe(false);
    expect(ready).toBe(false);
    expect(logLines.some((line) => line.includes("usage stream not created yet"))).toBe(true);

    // Billing starts and makes the stream (its settings); registry finds it within its backoff.
    await ensureUsageStream(nc, names, { replicas: 1 });
    await consumer.ready;
    expect(logLines.some((line) => line.includes("usage stream found"))).toBe(true);

    const hosterId = randomUUID();
    const event = UsageCompleted.fromPartial({
      requestId: `req_${randomUUID()}`,
      accountId: randomUUID(),
      provider: "hoster",
      hosterId,
      usageMismatch: "output",
    });
    await jetstream(nc).publish(names.usageCompleted, UsageCompleted.encode(event).finish(), {
      msgID: event.requestId,
    });
    const deadline = Date.now() + 10_000;
    while (!written.some((counts) => counts.get(hosterId) === 1) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(written.some((counts) => counts.get(hosterId) === 1)).toBe(true);
  } finally {
    await consumer.stop();
  }
});

it("stops at once while still waiting for the stream", async () => {
  const other = eventNames(freshEventsPrefix());
  const consumer = await startHosterUsageConsumer(
    nc,
    other,
    {
      store: { addUsageMismatches: async () => undefined },
      minutes: { add: async () => undefined, prune: async () => undefined },
      transaction: (work) => work(),
      deadLetters: async () => undefined,
      clock: () => new Date(),
    },
    createRegistryMetrics().usageMismatches,
    log,
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  const stopping = performance.now();
  await consumer.stop();
  expect(performance.now() - stopping).toBeLessThan(500);
  await expect(consumer.ready).rejects.toBeDefined();
});
