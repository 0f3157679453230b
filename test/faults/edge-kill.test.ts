/**
 * An edge killed with SIGKILL under a subscriber's full `max_concurrent`, and started again under
 * the same EDGE_ID, with the production defaults (LEASE_TTL_MS 2 s, EDGE_ISOLATION_MS 60 s,
 * MAX_REQUEST_MS 10.5 min): nothing shortened, so the test shows what a subscriber lives through.
 * The edge runs as a child process (its real `main.ts`: no final report, no ReturnLeases); the
 * rest of the system runs in this process as test/e2e/system.ts builds it.
 *
 * What must hold (docs/leases.md, "Incarnations"): the restarted process's first call takes the
 * next incarnation, which closes the dead one's leases at once, so the subscriber gets its three
 * concurrent answers within 5 s of the restart, and 5 s after it no credit is held for them.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEST_NATS_URL } from "@mkt/testkit/env";
import { freePort } from "@mkt/testkit/ports";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { openBillingDb, postChat, type BillingDb } from "../e2e/billing-db.ts";
import { startChild, waitForReady, type Child } from "../e2e/child-process.ts";
import { registerHoster, subscribeToFreePlan, type RegisteredHoster } from "../e2e/hoster-fixture.ts";
import { streamAnswer } from "../e2e/streamed-answer.ts";
import { startSystem, type RunningSystem } from "../e2e/system.ts";

/** The production default, which test/e2e/system.ts shortens for other tests; every service the same. */
const LEASE_TTL_MS = "2000";
const MAX_CONCURRENT = 3;
const EDGE_ID = "edge-kill-0";
/** The bound on a restarted edge's subscriber getting its slots back. */
const BOUND_MS = 5_000;
// 20 tokens a second: a 200-token answer streams 10 s, far past the kill.
const SLOW = { DEMO_TOKENS_PER_SECOND: "20", DEMO_COMPLETION_TOKENS: "200" };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let system: RunningSystem;
let hoster: RegisteredHoster;
let db: BillingDb;
let edgeEnv: Record<string, string>;
let edgeUrl: string;
const children: Child[] = [];

beforeAll(async () => {
  system = await startSystem({
    billing: { LEASE_TTL_MS, TIERS: JSON.stringify({ free: { limit_per_minute: 1_000, limit_per_day: 10_000 } }) },
    accounts: { PRINCIPAL_TTL_MS: LEASE_TTL_MS },
    model: SLOW,
  });
  hoster = await registerHoster(system, { serverEnv: SLOW });
  db = await openBillingDb(system.databaseUrl);
  const certs = await testCertificates();
  const port = await freePort();
  edgeUrl = `http://127.0.0.1:${port}`;
  edgeEnv = {
    ...certs.env("edge"),
    EDGE_ID,
    HOST: "127.0.0.1",
    PORT: String(port),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: system.eventsPrefix,
    ACCOUNTS_ADDR: system.grpcAddresses.accounts,
    BILLING_ADDR: system.grpcAddresses.billing,
    REGISTRY_ADDR: system.grpcAddresses.registry,
    ADMIN_TOKEN: system.adminToken,
    // The hoster's server listens on loopback.
    ALLOW_PRIVATE_UPSTREAMS: "true",
  };
}, 60_000);

afterAll(async () => {
  for (const child of children) {
    if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill("SIGKILL");
  }
  await db?.close();
  await hoster?.server.close();
  await system?.close();
});

async function startEdgeProcess(): Promise<Child> {
  const child = startChild("edge/src/main.ts", edgeEnv);
  children.push(child);
  await waitForReady(edgeUrl, child);
  return child;
}

describe("an edge killed with SIGKILL and started again under the same EDGE_ID (production defaults)", () => {
  it("gives a subscriber whose slots were all in flight on it its max_concurrent back at once", async () => {
    // A retried attempt starts from no edge process (the port is the same).
    for (const child of children.splice(0)) {
      if (child.process.exitCode === null && child.process.signalCode === null) {
        child.process.kill("SIGKILL");
        await child.exited;
      }
    }
    const { scopedKey: scopedKey, subscriber } = await subscribeToFreePlan(system, hoster, {
      rpmLimit: 1_000,
      maxConcurrent: MAX_CONCURRENT,
    });
    const ask = (content: string) => ({ model: hoster.modelId, messages: [{ role: "user", content }] });

    // 1. The subscriber's three slots in flight on the edge, and a pay-as-you-go answer holding credit.
    const first = await startEdgeProcess();
    const streams = [
      ...Array.from({ length: MAX_CONCURRENT }, (_, i) =>
        streamAnswer(edgeUrl, scopedKey, { ...ask(`long ${i}`), max_tokens: 200 }),
      ),
      streamAnswer(edgeUrl, subscriber.apiKey, {
        model: "demo-small",
        max_tokens: 200,
        messages: [{ role: "user", content: "long" }],
      }),
    ];
    await Promise.all(streams.map((s) => s.started));
    // A fourth is refused: every slot is in use.
    const refused = await postChat(edgeUrl, scopedKey, { ...ask("one too many"), max_tokens: 2 });
    expect(refused.status).toBe(429);
    await refused.text();
    const dead = (await db.query<{ id: string }>(`select id from leases where edge_id = $1`, [EDGE_ID])).map(
      (row) => row.id,
    );
    expect(dead.length).toBeGreaterThan(0);
    const heldBefore = await db.figure(`select sum(held_micros)::text as v from leases where id = any($1)`, [dead]);
    expect(heldBefore).toBeGreaterThan(0n);

    // 2. SIGKILL: the answers in flight die with the process; nothing is reported to billing.
    const killedAt = Date.now();
    first.process.kill("SIGKILL");
    await first.exited;
    for (const seen of await Promise.all(streams.map((s) => s.finished))) {
      expect(seen).toMatchObject({ status: 200, done: false });
    }

    // 3. Started again under the same EDGE_ID: three concurrent answers within 5 s of its being
    // back (its readiness: how long Node takes to start is the machine's, not the edge's).
    const spawnedAt = Date.now();
    await startEdgeProcess();
    const restartedAt = Date.now();
    const answers = await Promise.all(
      Array.from({ length: MAX_CONCURRENT }, async (_, i) => {
        const res = await postChat(edgeUrl, scopedKey, { ...ask(`again ${i}`), max_tokens: 2 });
        const body = await res.text();
        return { status: res.status, body, at: Date.now() };
      }),
    );
    const answeredAt = Math.max(...answers.map((a) => a.at));
    console.log(
      `edge kill at production defaults: started again ${spawnedAt - killedAt} ms after the kill, ready in ` +
        `${restartedAt - spawnedAt} ms; ${MAX_CONCURRENT} concurrent answers ${answeredAt - restartedAt} ms after ` +
        `it was ready; ${heldBefore} micro-USD held by the dead process's ${dead.length} lease(s) before`,
    );
    for (const a of answers) expect(a.status, a.body).toBe(200);
    expect(answeredAt - restartedAt).toBeLessThan(BOUND_MS);

    // 4. Five seconds after the restart, nothing is held for the dead process's leases.
    await sleep(Math.max(0, restartedAt + BOUND_MS - Date.now()));
    const leases = await db.query<{ status: string; held: string; released: boolean }>(
      `select status, held_micros::text as held, released_at is not null as released from leases where id = any($1)`,
      [dead],
    );
    for (const lease of leases) expect(lease).toEqual({ status: "closed", held: "0", released: true });
  }, 60_000);
});
