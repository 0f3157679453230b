import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect } from "@nats-io/transport-node";
import { openDatabase, type Orm } from "@mkt/runtime/db";
import { eventNames } from "@mkt/runtime/nats";
import { UsageCompleted } from "@mkt/proto/events/v1/events";
import { startPrivateNatsServer, type PrivateNatsServer } from "@mkt/testkit/nats-server";
import { entities } from "../src/entities.ts";
import { createRegistryMetrics } from "../src/metrics/registry-metrics.ts";
import { startRegistry } from "../src/server.ts";
import { UsageOutbox } from "../src/usage/usage-outbox.ts";
import { UsagePublisher } from "../src/usage/usage-publisher.ts";
import { UsageStream } from "../src/usage/usage-stream.ts";
import { startHarness, waitFor, type Harness } from "./registry-harness.ts";

// The usage outbox (docs/usage-outbox.md) against a nats-server of this file's own, stopped and
// restarted under a running registry, and the registry's real Postgres database.

const ACK_TIMEOUT_MS = 300;

let nats: PrivateNatsServer;
let h: Harness;
let db: pg.Client;

beforeAll(async () => {
  nats = await startPrivateNatsServer();
  h = await startHarness(
    {
      USAGE_PUBLISH_TIMEOUT_MS: String(ACK_TIMEOUT_MS),
      // Longer than any test here: a replay seen within one is the start's or the reconnect's.
      USAGE_OUTBOX_REPLAY_INTERVAL_MS: "600000",
    },
    { natsUrl: nats.url },
  );
  db = new pg.Client({ connectionString: h.databaseUrl });
  await db.connect();
});

afterAll(async () => {
  await nats.start(); // the harness drains its NATS connection
  await h?.close();
  await db?.end();
  await nats?.close();
});

/** Request ids in the outbox, oldest first. */
async function outboxIds(): Promise<string[]> {
  const { rows } = await db.query<{ request_id: string }>("select request_id from registry.usage_outbox order by id");
  return rows.map((r) => r.request_id);
}

async function metric(name: string, port = h.registry.metricsPort): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return Number(line?.split(" ")[1] ?? NaN);
}

/** Runs `count` chat completions together; each must end OK with its whole answer. */
async function completeChats(count: number): Promise<string[]> {
  const requests = await Promise.all(Array.from({ length: count }, () => h.chatRequest("demo-small")));
  const results = await Promise.all(requests.map((r) => h.chat(r)));
  for (const result of results) {
    expect(result.error).toBeUndefined();
    expect(result.events.length).toBeGreaterThan(0);
  }
  return requests.map((r) => r.requestId);
}

/** Waits for the outbox to hold none of `ids`, then checks JetStream holds each exactly once. */
async function expectReplayedOnce(ids: string[], timeoutMs = 15_000): Promise<void> {
  const left = await waitFor(outboxIds, (rows) => !rows.some((id) => ids.includes(id)), timeoutMs);
  expect(left.filter((id) => ids.includes(id))).toEqual([]);
  for (const id of ids) {
    const stored = await h.storedEvents(id);
    expect(stored.map((e) => e.requestId)).toEqual([id]);
    expect(stored[0]!.success).toBe(true);
  }
}

// First, while the file's NATS has never stopped.
it("publishes to JetStream on the common path and never writes the outbox table", async () => {
  const ids = await completeChats(5);
  for (const id of ids) expect(await h.storedEvents(id)).toHaveLength(1);
  // The identity sequence moves on every insert, even one rolled back: not called means no row
  // was ever written (nor written and deleted).
  const { rows } = await db.query<{ is_called: boolean }>(`select is_called from registry.usage_outbox_id_seq`);
  expect(rows[0]!.is_called).toBe(false);
  expect(await metric("mkt_usage_outbox_written_total")).toBe(0);
});

describe("with the file's NATS stopped", () => {
  it("puts completed calls' events in the outbox, ends the calls OK, and replays them once NATS is back", async () => {
    await nats.stop();
    const started = Date.now();
    const ids = await completeChats(6);
    // Each call waited for JetStream's ack up to the bound, then for the outbox's commit.
    expect(Date.now() - started).toBeGreaterThanOrEqual(ACK_TIMEOUT_MS);
    expect((await outboxIds()).sort()).toEqual([...ids].sort());
    expect(await metric("mkt_usage_outbox_written_total")).toBe(6);
    expect(await metric("mkt_usage_outbox_events")).toBe(6);

    await nats.start();
    await expectReplayedOnce(ids);
    expect(await metric("mkt_usage_outbox_replayed_total")).toBe(6);
    expect(await metric("mkt_usage_outbox_events")).toBe(0);
  });

  it("leaves the outbox to the next registry, which replays it on start", async () => {
    await nats.stop();
    const ids = await completeChats(3);
    expect((await outboxIds()).sort()).toEqual([...ids].sort());
    // A shutdown during the outage: the events stay in the outbox.
    await h.registry.close(1_000);
    expect((await outboxIds()).sort()).toEqual([...ids].sort());

    await nats.start();
    const next = await startRegistry({ ...h.config, GRPC_PORT: 0, METRICS_PORT: 0 }, h.log);
    try {
      await expectReplayedOnce(ids);
      expect(await metric("mkt_usage_outbox_replayed_total", next.metricsPort)).toBe(3);
    } finally {
      await next.close(1_000);
    }
  });
});

describe("with NATS stopped and the outbox failing too", () => {
  it("keeps trying both until one holds the event, and only then returns", async () => {
    const nc = await connect({ servers: nats.url, maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    const metrics = createRegistryMetrics();
    let refusals = 2;
    const added: string[] = [];
    // Stands in for a database that is down for the first two tries (a real one is shared here).
    const outbox = {
      async add(requestId: string) {
        if (refusals-- > 0) throw new Error("connection refused");
        added.push(requestId);
      },
    };
    const publisher = new UsagePublisher(
      new UsageStream(nc, eventNames(h.config.EVENTS_PREFIX).usageCompleted, ACK_TIMEOUT_MS),
      outbox,
      {
        outboxWritten: metrics.usageOutboxWritten,
        outboxDepth: metrics.usageOutboxDepth,
        durabilityFailures: metrics.usageDurabilityFailures,
        durable: metrics.usageDurable,
      },
      h.log,
    );
    await nats.stop();
    try {
      const requestId = `req_${randomUUID()}`;
      await publisher.publish(UsageCompleted.fromPartial({ requestId }));
      expect(added).toEqual([requestId]);
      expect((await metrics.usageDurabilityFailures.get()).values[0]?.value).toBe(2);
      expect((await metrics.usageOutboxWritten.get()).values[0]?.value).toBe(1);
      // Timed from the publish, through the refused tries, to the outbox's commit.
      const durable = (await metrics.usageDurable.get()).values;
      expect(durable.find((v) => v.metricName === "mkt_usage_durable_seconds_count")).toMatchObject({
        labels: { via: "outbox" },
        value: 1,
      });
    } finally {
      await nats.start();
      await nc.close();
    }
  });
});

describe("the outbox's writes", () => {
  let orm: Orm;
  beforeAll(async () => {
    orm = await openDatabase({
      url: h.databaseUrl,
      schema: "registry",
      entities,
      migrations: [],
      migrate: false,
      log: h.log,
    });
  });
  afterAll(() => orm?.close());

  it("commits events that wait together in few transactions (group commit)", async () => {
    const outbox = new UsageOutbox(orm);
    const ids = Array.from({ length: 40 }, () => `req_${randomUUID()}`);
    await Promise.all(ids.map((id) => outbox.add(id, Buffer.from(id))));
    const { rows } = await db.query<{ request_id: string; payload: Buffer; tx: string }>(
      `select request_id, payload, xmin::text as tx from registry.usage_outbox where request_id = any($1)`,
      [ids],
    );
    expect(rows.map((r) => r.request_id).sort()).toEqual([...ids].sort());
    for (const row of rows) expect(row.payload.toString()).toBe(row.request_id);
    // The first insert starts alone; the 39 that arrived while it ran go in the next one.
    expect(new Set(rows.map((r) => r.tx)).size).toBeLessThanOrEqual(2);
    await db.query("delete from registry.usage_outbox where request_id = any($1)", [ids]);
  });
});
