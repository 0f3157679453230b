import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import pg from "pg";
import { eventNames } from "@mkt/runtime/nats";
import { USAGE_BATCH_HEADER } from "@mkt/runtime/usage-messages";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { UsageBatch, UsageCompleted } from "@mkt/proto/events/v1/events";
import { HosterModel } from "@mkt/proto/registry/v1/registry";
import { startRealHoster } from "./hoster-servers.ts";
import { startHarness, waitFor, type Harness } from "./registry-harness.ts";

// Registry's hoster figures skip nothing silently: an event of a batch it cannot decode goes to
// its own usage_dead_letters, and the message is acked once that row is committed. The operator
// lists them and replays them (ListUsageDeadLetters, ReplayUsageDeadLetters) once the cause is fixed.

let h: Harness;
let nc: NatsConnection;
let db: pg.Client;
const servers: Array<{ close(): Promise<void> }> = [];
const undecodable = Buffer.from([0x0f, 0xff, 0x01]);
beforeAll(async () => {
  h = await startHarness();
  nc = await connect({ servers: TEST_NATS_URL });
  db = new pg.Client({ connectionString: h.config.DATABASE_URL, options: "-c search_path=registry" });
  await db.connect();
});
afterAll(async () => {
  for (const server of servers) await server.close();
  await db?.end();
  await nc?.drain();
  await h?.close();
});

/** Publishes encoded usage events as one batch message, as an edge does. */
async function publishBatch(events: Uint8Array[], edgeId: string): Promise<void> {
  const headers = natsHeaders();
  headers.set(USAGE_BATCH_HEADER, "1");
  const batch = UsageBatch.fromPartial({
    events: events.map((event) => Buffer.from(event)),
    traceparents: events.map(() => ""),
    edgeId,
    bootId: randomUUID(),
    sequence: 1n,
  });
  await jetstream(nc).publish(eventNames(h.config.EVENTS_PREFIX).usageCompleted, UsageBatch.encode(batch).finish(), {
    msgID: `batch-${randomUUID()}`,
    headers,
  });
}

/** A hoster registered with one model on a real hoster server; returns its id. */
async function registerOneModelHoster(name: string, modelId: string, clientIp: string): Promise<string> {
  const server = await startRealHoster({ models: [modelId] });
  servers.push(server);
  const { hoster } = await h.client.registerHoster({
    name,
    email: `${modelId}-${randomUUID()}@example.com`,
    endpointUrl: server.url,
    apiKey: server.token,
    inviteCode: h.accounts.invite(),
    password: "",
    clientIp,
    models: [HosterModel.fromPartial({ modelId, contextWindow: 8192n })],
  });
  return hoster!.hosterId;
}

describe("registry's usage dead letters", () => {
  it("keeps an undecodable event of a batch and acks the message", async () => {
    const names = eventNames(h.config.EVENTS_PREFIX);
    const good = UsageCompleted.fromPartial({ requestId: `req_${randomUUID()}`, accountId: randomUUID() });
    await publishBatch([UsageCompleted.encode(good).finish(), undecodable], "registry-dead-letters-test");
    const rows = await waitFor(
      async () =>
        (await db.query(`select subject, reason, attempts from usage_dead_letters where data = $1`, [undecodable]))
          .rows,
      (found) => found.length > 0,
      20_000,
    );
    expect(rows).toEqual([
      { subject: names.usageCompleted, reason: expect.stringMatching(/^undecodable usage event/), attempts: 1 },
    ]);
    const jsm = await jetstreamManager(nc);
    const info = await waitFor(
      () => jsm.consumers.info(names.usageStream, names.hosterStatsConsumer),
      (i) => i.num_pending === 0 && i.num_ack_pending === 0,
    );
    expect({ pending: info.num_pending, unacked: info.num_ack_pending }).toEqual({ pending: 0, unacked: 0 });
  });

  it("lists the undecodable and the failing event, and a replay writes a fixed one's figures once", async () => {
    const hosterId = await registerOneModelHoster("Dead Letter GPUs", "dl-model", "203.0.113.9");
    // A fault the operator has not fixed yet: the database refuses one model's minutes.
    await db.query(`
      create or replace function refuse_poison() returns trigger language plpgsql as $$
      begin raise exception 'poison-model minutes refused'; end $$`);
    await db.query(`drop trigger if exists refuse_poison on endpoint_minutes`);
    await db.query(`
      create trigger refuse_poison before insert on endpoint_minutes
      for each row when (new.model_id = 'poison-model') execute function refuse_poison()`);
    const usage = (modelId: string) =>
      UsageCompleted.fromPartial({
        requestId: `req_${randomUUID()}`,
        provider: "hoster",
        hosterId,
        modelId,
        success: true,
        upstreamStatus: 200,
        latencyMs: 400n,
        startedAt: new Date().toISOString(),
        usageMismatch: "claimed more output tokens than the edge counted",
      });
    // As the consumer leaves them after ten failed writes: one whose cause is now gone, one whose is not.
    const fixed = usage("dl-model");
    const poison = usage("poison-model");
    const ids: Record<string, string> = {};
    for (const event of [fixed, poison]) {
      const { rows } = await db.query<{ id: string }>(
        `insert into usage_dead_letters (letter_key, request_id, subject, data, reason, attempts)
         values ($1, $2, 'usage.completed', $3, 'writing hosters'' figures failed 10 times: injected', 10)
         returning id`,
        [`request:${event.requestId}`, event.requestId, Buffer.from(UsageCompleted.encode(event).finish())],
      );
      ids[event.requestId] = rows[0]!.id;
    }

    const { letters } = await h.client.listUsageDeadLetters({});
    expect(letters.map((l) => ({ requestId: l.requestId, reason: l.reason, attempts: l.attempts }))).toEqual([
      { requestId: "", reason: expect.stringMatching(/^undecodable usage event/), attempts: 1 },
      { requestId: fixed.requestId, reason: "writing hosters' figures failed 10 times: injected", attempts: 10 },
      { requestId: poison.requestId, reason: "writing hosters' figures failed 10 times: injected", attempts: 10 },
    ]);
    expect(Buffer.from(letters[0]!.data)).toEqual(undecodable);

    const figures = async () => {
      const { rows } = await db.query<{ model_id: string; requests: number }>(
        `select model_id, sum(requests)::int as requests from endpoint_minutes where hoster_id = $1 group by 1`,
        [hosterId],
      );
      const { rows: mismatches } = await db.query<{ usage_mismatches: string }>(
        `select usage_mismatches from hosters where id = $1`,
        [hosterId],
      );
      return { minutes: rows, mismatches: mismatches[0]!.usage_mismatches };
    };
    const all = await h.client.replayUsageDeadLetters({ ids: [] });
    expect(all.replayed).toBe(1);
    expect(all.failed.map((l) => [l.requestId, l.reason, l.attempts])).toEqual([
      ["", expect.stringMatching(/^replay: undecodable usage event/), 2],
      [poison.requestId, expect.stringMatching(/^replay: .*poison-model minutes refused/), 11],
    ]);
    expect(await figures()).toEqual({ minutes: [{ model_id: "dl-model", requests: 1 }], mismatches: "1" });

    // Replayed again, by name and with everything, and by two calls at once: still counted once.
    expect((await h.client.replayUsageDeadLetters({ ids: [ids[fixed.requestId]!] })).replayed).toBe(0);
    expect((await h.client.replayUsageDeadLetters({ ids: [] })).replayed).toBe(0);
    const racing = usage("dl-model");
    const { rows } = await db.query<{ id: string }>(
      `insert into usage_dead_letters (letter_key, request_id, subject, data, reason, attempts)
       values ($1, $2, 'usage.completed', $3, 'injected', 10) returning id`,
      [`request:${racing.requestId}`, racing.requestId, Buffer.from(UsageCompleted.encode(racing).finish())],
    );
    const both = await Promise.all([
      h.client.replayUsageDeadLetters({ ids: [rows[0]!.id] }),
      h.client.replayUsageDeadLetters({ ids: [rows[0]!.id] }),
    ]);
    expect(both.map((r) => r.replayed).sort()).toEqual([0, 1]);
    expect(await figures()).toEqual({ minutes: [{ model_id: "dl-model", requests: 2 }], mismatches: "2" });

    // What still fails stays open, listed with its reason now, and the gauge says how many.
    const open = await h.client.listUsageDeadLetters({});
    expect(open.letters.map((l) => l.requestId)).toEqual(["", poison.requestId]);
    expect(open.letters[1]!.reason).toMatch(/^replay: .*poison-model minutes refused/);
    const metrics = await (await fetch(`http://127.0.0.1:${h.registry.metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^mkt_usage_dead_letters 2$/m);
  });

  it("counts nothing of a batch whose write failed between its two tables: written again, once", async () => {
    const hosterId = await registerOneModelHoster("Once GPUs", "once-model", "203.0.113.10");
    // The minutes' insert fails once, after the mismatch counts were written: a sequence, so that
    // the refusal is not rolled back with the transaction it breaks.
    await db.query(`drop sequence if exists refuse_once_seq cascade`);
    await db.query(`create sequence refuse_once_seq`);
    await db.query(`
      create or replace function refuse_once() returns trigger language plpgsql as $$
      begin
        if nextval('refuse_once_seq') = 1 then raise exception 'once-model minutes refused once'; end if;
        return new;
      end $$`);
    await db.query(`drop trigger if exists refuse_once on endpoint_minutes`);
    await db.query(`
      create trigger refuse_once before insert on endpoint_minutes
      for each row when (new.model_id = 'once-model') execute function refuse_once()`);
    const event = UsageCompleted.fromPartial({
      requestId: `req_${randomUUID()}`,
      provider: "hoster",
      hosterId,
      modelId: "once-model",
      success: true,
      upstreamStatus: 200,
      latencyMs: 300n,
      startedAt: new Date().toISOString(),
      usageMismatch: "claimed more output tokens than the edge counted",
    });
    await publishBatch([UsageCompleted.encode(event).finish()], "registry-once-test");
    const minutes = await waitFor(
      async () =>
        (
          await db.query<{ requests: number }>(
            `select sum(requests)::int as requests from endpoint_minutes where hoster_id = $1`,
            [hosterId],
          )
        ).rows[0]!.requests,
      (n) => n !== null,
      20_000,
    );
    const { rows } = await db.query<{ usage_mismatches: string }>(
      `select usage_mismatches from hosters where id = $1`,
      [hosterId],
    );
    const { rows: refusals } = await db.query<{ last_value: string }>(`select last_value from refuse_once_seq`);
    expect({
      minutes,
      mismatches: rows[0]!.usage_mismatches,
      refusedFirst: Number(refusals[0]!.last_value) >= 2,
    }).toEqual({
      minutes: 1,
      mismatches: "1",
      refusedFirst: true,
    });
    await db.query(`drop trigger refuse_once on endpoint_minutes`);
  });

  it("refuses an id that is not a dead letter's", async () => {
    await expect(h.client.replayUsageDeadLetters({ ids: ["not-a-uuid"] })).rejects.toThrow(/not a dead letter id/);
  });
});
