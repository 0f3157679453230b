/**
 * Billing owns LEASE_TTL_MS, EDGE_ISOLATION_MS and MAX_REQUEST_MS (docs/leases.md#settings): it
 * sends them in every lease reply, an edge runs by them and configures none of its own, and each
 * lease keeps the bounds it was granted under.
 *
 * An edge streams two long answers on a lease billing granted with EDGE_ISOLATION_MS 20 s. Then
 * the edge is cut off from billing (its gRPC calls go through a TCP proxy this test owns), and
 * billing is restarted with EDGE_ISOLATION_MS 3 s, which the edge never hears of. What must hold:
 * the edge ends its streams by the bound it was told (20 s after its last answered call), and the
 * restarted billing releases the lease by that bound too, never by its own shorter one: no credit is
 * released under a stream still running, so the streams' usage settles on the hold and nothing is
 * written off. An edge whose environment still sets a lease setting that differs from billing's
 * refuses to start, naming both values. (test/faults/edge-isolation.test.ts runs a billing whose
 * bound is shorter than the edges' old default of 60 s; test/e2e/keys.test.ts a revoked key refused
 * on every edge within accounts' PRINCIPAL_TTL_MS.)
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "@mkt/runtime/logger";
import { freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { freePort } from "@mkt/testkit/ports";
import { freshServiceDatabases, type FreshServiceDatabases } from "@mkt/testkit/service-databases";
import { startTcpProxy, type TcpProxy } from "@mkt/testkit/tcp-proxy";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { loadBillingConfig } from "../../services/billing/src/config.ts";
import { startBilling, type BillingHandle } from "../../services/billing/src/server.ts";
import { loadEdgeConfig } from "../../edge/src/config.ts";
import { startEdge, type EdgeHandle } from "../../edge/src/server.ts";
import { streamAnswer } from "../e2e/streamed-answer.ts";
import { signUp, startSystem, type RunningSystem } from "../e2e/system.ts";

const LEASE_TTL_MS = 2_000;
const GRANTED_ISOLATION_MS = 20_000;
const RESTARTED_ISOLATION_MS = 3_000;
// 20 tokens a second: a 600-token answer streams 30 s, past the bound the edge was told.
const SLOW = { DEMO_TOKENS_PER_SECOND: "20", DEMO_COMPLETION_TOKENS: "600" };
const EDGE_ID = "setting-owner-edge";

const log = createLogger("e2e", process.env.E2E_LOG_LEVEL ?? "silent");
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let system: RunningSystem;
let databases: FreshServiceDatabases;
let billing: BillingHandle | undefined;
let proxy: TcpProxy;
let edge: EdgeHandle | undefined;
let db: pg.Client;
let billingConfig: (isolationMs: number) => ReturnType<typeof loadBillingConfig>;

beforeAll(async () => {
  system = await startSystem({ model: SLOW });
  databases = await freshServiceDatabases();
  const certs = await testCertificates();
  const eventsPrefix = freshEventsPrefix();
  const port = await freePort();
  const secretsKey = randomBytes(32).toString("hex");
  billingConfig = (isolationMs) =>
    loadBillingConfig({
      ...certs.env("billing"),
      NATS_URL: TEST_NATS_URL,
      EVENTS_PREFIX: eventsPrefix,
      GRPC_PORT: String(port),
      METRICS_PORT: "0",
      DATABASE_URL: databases.services.billing.url,
      MIGRATE_DATABASE_URL: databases.services.billing.migrateUrl,
      ACCOUNTS_ADDR: system.grpcAddresses.accounts,
      REGISTRY_ADDR: system.grpcAddresses.registry,
      SECRETS_KEY: secretsKey,
      LEASE_TTL_MS: String(LEASE_TTL_MS),
      EDGE_ISOLATION_MS: String(isolationMs),
      TIERS: JSON.stringify({ free: { limit_per_minute: 1_000, limit_per_day: 10_000 } }),
    });
  billing = await startBilling(billingConfig(GRANTED_ISOLATION_MS), log);
  proxy = await startTcpProxy(`127.0.0.1:${port}`);
  // No lease setting of the edge's own: it runs by billing's replies.
  edge = await startEdge(
    loadEdgeConfig({
      ...certs.env("edge"),
      EDGE_ID,
      HOST: "127.0.0.1",
      PORT: "0",
      NATS_URL: TEST_NATS_URL,
      EVENTS_PREFIX: eventsPrefix,
      ACCOUNTS_ADDR: system.grpcAddresses.accounts,
      BILLING_ADDR: proxy.url,
      REGISTRY_ADDR: system.grpcAddresses.registry,
      ADMIN_TOKEN: system.adminToken,
      SHUTDOWN_GRACE_MS: "0",
      ALLOW_PRIVATE_UPSTREAMS: "true",
    }),
    log,
  );
  db = new pg.Client({ connectionString: databases.databaseUrl, options: "-c search_path=billing" });
  await db.connect();
}, 60_000);

afterAll(async () => {
  proxy?.accept();
  await edge?.close();
  await proxy?.close();
  await billing?.close();
  await db?.end();
  await databases?.dropRoles();
  await system?.close();
});

const figure = async (sql: string, params: unknown[] = []) => {
  const { rows } = await db.query<{ v: string | null }>(sql, params);
  return rows[0]?.v ?? null;
};

describe("billing owns the lease settings", () => {
  it("a billing restarted with a shorter EDGE_ISOLATION_MS releases a cut-off edge's lease by the bound it was granted under, never under a live stream", async () => {
    const { apiKey } = await signUp(edge!.url);
    const ask = (i: number) => ({
      model: "demo-small",
      max_tokens: 600,
      messages: [{ role: "user", content: `long ${i}` }],
    });
    const streams = [0, 1].map((i) => {
      const answer = streamAnswer(edge!.url, apiKey, ask(i));
      return { ...answer, endedAt: answer.finished.then(() => Date.now()) };
    });
    await Promise.all(streams.map((s) => s.started));
    await sleep(LEASE_TTL_MS); // a heartbeat or two: the edge's last answered call is recent
    expect(await figure(`select isolation_ms::text as v from leases where edge_id = $1`, [EDGE_ID])).toBe(
      String(GRANTED_ISOLATION_MS),
    );

    const cutAt = Date.now();
    proxy.cut({ refuse: true });
    await billing!.close();
    billing = await startBilling(billingConfig(RESTARTED_ISOLATION_MS), log);

    // Billing releases the lease (its closer, every TTL) once its deadline + its bound has passed.
    let releasedAt: number | undefined;
    while (releasedAt === undefined && Date.now() - cutAt < GRANTED_ISOLATION_MS + 6 * LEASE_TTL_MS) {
      const released = await figure(
        `select count(*)::text as v from leases where edge_id = $1 and released_at is not null`,
        [EDGE_ID],
      );
      if (released !== "0") releasedAt = Date.now();
      else await sleep(100);
    }
    const seen = await Promise.all(streams.map((s) => s.finished));
    const ended = await Promise.all(streams.map((s) => s.endedAt));
    const deadline = new Date(
      (await figure(`select deadline::text as v from edge_sessions where edge_id = $1`, [EDGE_ID]))!,
    );
    console.log(
      `cut-off edge: streams ended ${ended.map((at) => at - cutAt).join(", ")} ms after the cut (the edge's bound ` +
        `${GRANTED_ISOLATION_MS} ms); the restarted billing (its own bound ${RESTARTED_ISOLATION_MS} ms) released ` +
        `the lease ${releasedAt === undefined ? "never" : releasedAt - cutAt} ms after it, ` +
        `${releasedAt === undefined ? "-" : releasedAt - deadline.getTime()} ms past the edge's deadline`,
    );
    for (const [i, s] of seen.entries()) {
      expect(s).toMatchObject({ status: 200, done: false, broken: false, errorCode: "service_unavailable" });
      // By the bound the edge was told (its last answered call came at most TTL / 2 before the cut).
      expect(ended[i]! - cutAt).toBeGreaterThanOrEqual(GRANTED_ISOLATION_MS - LEASE_TTL_MS / 2 - 100);
      expect(ended[i]! - cutAt).toBeLessThan(GRANTED_ISOLATION_MS + 1_000);
    }
    // Released by the lease's own bound, after every stream on it ended.
    expect(releasedAt).toBeDefined();
    expect(releasedAt!).toBeGreaterThanOrEqual(Math.max(...ended));
    expect(releasedAt! - deadline.getTime()).toBeGreaterThanOrEqual(GRANTED_ISOLATION_MS - 500);

    // The streams' usage settles on the lease's hold: nothing written off, nothing held, no
    // wallet below zero.
    await expect
      .poll(async () => figure(`select count(*)::text as v from usage_records`), { timeout: 15_000, interval: 250 })
      .toBe("2");
    expect(await figure(`select coalesce(sum(write_off_micros), 0)::text as v from usage_records`)).toBe("0");
    expect(await figure(`select sum(held_micros)::text as v from wallets`)).toBe("0");
    expect(await figure(`select count(*)::text as v from wallets where posted_micros < 0`)).toBe("0");
  }, 90_000);

  it("an edge whose environment sets a lease setting that differs from billing's refuses to start, naming both values", async () => {
    const certs = await testCertificates();
    const config = loadEdgeConfig({
      ...certs.env("edge"),
      EDGE_ID: "setting-owner-disagreeing",
      HOST: "127.0.0.1",
      PORT: "0",
      NATS_URL: TEST_NATS_URL,
      EVENTS_PREFIX: freshEventsPrefix(),
      ACCOUNTS_ADDR: system.grpcAddresses.accounts,
      BILLING_ADDR: `127.0.0.1:${billing!.port}`,
      REGISTRY_ADDR: system.grpcAddresses.registry,
      ADMIN_TOKEN: system.adminToken,
      // The edges' old defaults: billing (restarted above) has 2000 and 3000.
      LEASE_TTL_MS: "2000",
      EDGE_ISOLATION_MS: "60000",
    });
    await expect(startEdge(config, log)).rejects.toThrow(
      /EDGE_ISOLATION_MS: this edge's environment sets 60000, billing's is 3000/,
    );
  }, 30_000);
});
