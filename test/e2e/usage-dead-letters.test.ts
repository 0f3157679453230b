import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { connect, headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import { newRequestId } from "@mkt/runtime/ids";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { UsageBatch, UsageCompleted } from "@mkt/proto/events/v1/events";
import { eventNames } from "@mkt/runtime/nats";
import { USAGE_BATCH_HEADER } from "@mkt/runtime/usage-messages";
import pg from "pg";
import { openBillingDb, type BillingDb } from "./billing-db.ts";
import { registerHoster } from "./hoster-fixture.ts";
import { signUp, startSystem, type RunningSystem } from "./system.ts";

// The operator's side of usage dead letters, as an operator runs it: `npm run admin -- usage
// dead-letters [billing|registry]` and `… usage replay <id|all> [billing|registry]`
// (scripts/admin.ts, its own process) through the edge's admin API to billing, or to registry.

let system: RunningSystem;
let nc: NatsConnection;
let db: BillingDb;
beforeAll(async () => {
  system = await startSystem();
  nc = await connect({ servers: TEST_NATS_URL });
  db = await openBillingDb(system.databaseUrl);
});
afterAll(async () => {
  await db?.close();
  await nc?.drain();
  await system?.close();
});

const run = promisify(execFile);

/** scripts/admin.ts in a process of its own, against this system's edge. */
async function admin(...args: string[]): Promise<{ code: number; out: string }> {
  const script = join(import.meta.dirname, "../../scripts/admin.ts");
  const env = { ...process.env, ADMIN_URL: system.url, ADMIN_TOKEN: system.adminToken };
  try {
    const { stdout } = await run(process.execPath, [script, ...args], { env });
    return { code: 0, out: stdout };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, out: e.stdout + e.stderr };
  }
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("npm run admin -- usage dead-letters | replay", () => {
  it("lists what billing kept, and replays a letter whose cause is gone once", async () => {
    // What an edge cannot send but a broken one might: an event with no valid account, and bytes
    // that do not decode, in one batch.
    const accountless = UsageCompleted.fromPartial({ requestId: newRequestId(), accountId: "nobody" });
    const headers = natsHeaders();
    headers.set(USAGE_BATCH_HEADER, "1");
    const batch = UsageBatch.fromPartial({
      events: [Buffer.from(UsageCompleted.encode(accountless).finish()), Buffer.from([0x0f, 0xff])],
      traceparents: ["", ""],
      edgeId: "broken-edge",
      bootId: randomUUID(),
      sequence: 1n,
    });
    await jetstream(nc).publish(eventNames(system.eventsPrefix).usageCompleted, UsageBatch.encode(batch).finish(), {
      msgID: `broken-${randomUUID()}`,
      headers,
    });
    const listed = await until(
      () => admin("usage", "dead-letters"),
      ({ out }) => out.split("\n").filter((line) => line.includes("attempts")).length >= 2,
    );
    expect(listed.code).toBe(0);
    expect(listed.out).toContain(accountless.requestId);
    expect(listed.out).toMatch(/account_id "nobody" is not a UUID/);
    expect(listed.out).toMatch(/\(no request id\).*undecodable usage event/);

    // A letter whose cause has been fixed (as if billing had failed to settle it ten times): an
    // event of a real account, with no lease, recorded at no cost.
    const { accountId } = await signUp(system.url);
    const fixed = UsageCompleted.fromPartial({
      requestId: newRequestId(),
      accountId,
      modelId: "demo-small",
      provider: "local",
      inputTokens: 7n,
      outputTokens: 3n,
      success: true,
    });
    const [row] = await db.query<{ id: string }>(
      `insert into usage_dead_letters (letter_key, request_id, subject, data, reason, attempts)
       values ($1, $2, 'usage.completed', $3, 'settlement failed 10 times: injected', 10) returning id`,
      [`request:${fixed.requestId}`, fixed.requestId, Buffer.from(UsageCompleted.encode(fixed).finish())],
    );
    const replayed = await admin("usage", "replay", row!.id);
    expect(replayed).toEqual({ code: 0, out: "replayed 1; still failing 0\n" });
    const again = await admin("usage", "replay", row!.id);
    expect(again).toEqual({ code: 0, out: "replayed 0; still failing 0\n" });
    expect(
      await db.query(`select input_tokens, cost_micros from usage_records where request_id = $1`, [fixed.requestId]),
    ).toEqual([{ input_tokens: "7", cost_micros: "0" }]);

    // The letters nothing can fix stay, listed with their reasons; the replay says so.
    const all = await admin("usage", "replay", "all");
    expect(all.code).toBe(1);
    expect(all.out).toMatch(/^replayed 0; still failing 2\n/);
    expect((await admin("usage", "dead-letters")).out).not.toContain(fixed.requestId);
  });

  it("lists what registry kept apart from billing's, and replays a letter's figures once", async () => {
    const hoster = await registerHoster(system);
    const registryDb = new pg.Client({ connectionString: system.databaseUrl, options: "-c search_path=registry" });
    await registryDb.connect();
    try {
      // Bytes no consumer can decode: billing and registry each keep them, in their own tables.
      const garbage = Buffer.from([0x0f, 0xfe, 0x02]);
      const headers = natsHeaders();
      headers.set(USAGE_BATCH_HEADER, "1");
      const batch = UsageBatch.fromPartial({
        events: [garbage],
        traceparents: [""],
        edgeId: "broken-edge",
        bootId: randomUUID(),
        sequence: 1n,
      });
      await jetstream(nc).publish(eventNames(system.eventsPrefix).usageCompleted, UsageBatch.encode(batch).finish(), {
        msgID: `broken-${randomUUID()}`,
        headers,
      });
      const kept = `(no request id)  attempts 1`;
      const listed = await until(
        () => admin("usage", "dead-letters", "registry"),
        ({ out }) => out.includes(kept),
      );
      expect(listed.code).toBe(0);
      expect(listed.out).toMatch(/\(no request id\).*undecodable usage event/);

      // A letter whose cause is gone (as if registry had failed to write it ten times): a
      // registered hoster's answer, which only registry's figures count.
      const fixed = UsageCompleted.fromPartial({
        requestId: `req_${randomUUID()}`,
        provider: "hoster",
        hosterId: hoster.hosterId,
        modelId: hoster.modelId,
        success: true,
        upstreamStatus: 200,
        latencyMs: 300n,
        startedAt: new Date().toISOString(),
      });
      const { rows } = await registryDb.query<{ id: string }>(
        `insert into usage_dead_letters (letter_key, request_id, subject, data, reason, attempts)
         values ($1, $2, 'usage.completed', $3, 'writing hosters'' figures failed 10 times: injected', 10)
         returning id`,
        [`request:${fixed.requestId}`, fixed.requestId, Buffer.from(UsageCompleted.encode(fixed).finish())],
      );
      const id = rows[0]!.id;
      // The admin API's own answer for registry's letters, in the shape billing's have.
      const res = await fetch(`${system.url}/admin/usage/dead-letters?service=registry`, {
        headers: { authorization: `Bearer ${system.adminToken}` },
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { object: string; data: Array<Record<string, unknown>> };
      expect(body.object).toBe("list");
      expect(body.data.find((letter) => letter.id === id)).toEqual({
        object: "usage_dead_letter",
        id,
        request_id: fixed.requestId,
        subject: "usage.completed",
        reason: "writing hosters' figures failed 10 times: injected",
        attempts: 10,
        first_seen_at: expect.any(String),
        last_seen_at: expect.any(String),
        data_base64: Buffer.from(UsageCompleted.encode(fixed).finish()).toString("base64"),
      });
      // Billing's list (the default) knows nothing of registry's letter.
      expect((await admin("usage", "dead-letters")).out).not.toContain(fixed.requestId);

      expect(await admin("usage", "replay", id, "registry")).toEqual({ code: 0, out: "replayed 1; still failing 0\n" });
      expect(await admin("usage", "replay", id, "registry")).toEqual({ code: 0, out: "replayed 0; still failing 0\n" });
      const { rows: minutes } = await registryDb.query<{ requests: number }>(
        `select sum(requests)::int as requests from endpoint_minutes where hoster_id = $1`,
        [hoster.hosterId],
      );
      expect(minutes).toEqual([{ requests: 1 }]);

      // The bytes that do not decode (these, and the first test's) stay, listed; the replay says so and fails.
      const all = await admin("usage", "replay", "all", "registry");
      expect(all.code).toBe(1);
      expect(all.out).toMatch(/^replayed 0; still failing 2\n(.*replay: undecodable usage event.*\n){2}$/);
      const after = (await admin("usage", "dead-letters", "registry")).out;
      expect(after).not.toContain(fixed.requestId);
      expect(after).toContain("(no request id)");
    } finally {
      await registryDb.end();
      await hoster.server.close();
    }
  });

  it("refuses a service it does not know, with its usage line", async () => {
    const wrong = await admin("usage", "dead-letters", "accounts");
    expect(wrong.code).toBe(2);
    expect(wrong.out).toContain("usage dead-letters [billing|registry]");
  });
});
