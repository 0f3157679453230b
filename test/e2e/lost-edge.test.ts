/**
 * A lost edge (docs/architecture.md#a-crashed-edge-costs-nobody): an edge process killed with
 * SIGKILL while it holds an account's lease and streams answers for it. The edge runs as a child
 * process (the real `main.ts`, so the kill is real: no final report, no ReturnLeases); the model
 * server, accounts, registry, billing and a second edge run in this process and stay up.
 *
 * What must hold (docs/leases.md, "What a crash costs"): the answers in flight die with the edge
 * that relayed them (their clients see the connection drop) and, their usage never published,
 * are never charged. An edge that vanished for good: the room it never reported stays held until its
 * session's deadline + EDGE_ISOLATION_MS, and not a moment less, then the lease closer releases
 * it; meanwhile the other edge serves the account; once everything is returned, conservation is
 * exact. An edge started again under the same EDGE_ID: its new incarnation's first call releases
 * that room at once, long before the deadline + EDGE_ISOLATION_MS.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { createLogger } from "@mkt/runtime/logger";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { freePort } from "@mkt/testkit/ports";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { loadAccountsConfig } from "../../services/accounts/src/config.ts";
import { startAccounts } from "../../services/accounts/src/server.ts";
import { loadBillingConfig } from "../../services/billing/src/config.ts";
import { startBilling } from "../../services/billing/src/server.ts";
import { ledgerInvariants } from "../../services/billing/test/billing-harness.ts";
import { loadRegistryConfig } from "../../services/registry/src/config.ts";
import { startRegistry } from "../../services/registry/src/server.ts";
import { loadHosterServerConfig } from "../../hoster-server/src/config.ts";
import { startHosterServer } from "../../hoster-server/src/server.ts";
import { loadEdgeConfig } from "../../edge/src/config.ts";
import { startEdge, type EdgeHandle } from "../../edge/src/server.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { startChild, waitForReady, type Child } from "./child-process.ts";
import { streamAnswer } from "./streamed-answer.ts";
import { signUp } from "./system.ts";

// The demo model streams 20 tokens/s: an answer of 200 tokens runs 10 s, far past the kill.
const TOKENS_PER_SECOND = 20;
const LONG = 200;
const IN_FLIGHT = 6;
/** The product's default TTL, on billing and both edges (heartbeats every second). */
const LEASE_TTL_MS = 2_000;
/**
 * Short, so the vanished edge's room comes back within the test (the closer runs every TTL), yet
 * long enough that a restart's release at once is told from it. At the default (60 s) the same
 * release comes a minute after the deadline (docs/leases.md).
 */
const EDGE_ISOLATION_MS = 10_000;
/** The edge killed and never started again, and the one killed and started again. */
const VANISHED_EDGE_ID = "lost-edge-vanished";
const RESTARTED_EDGE_ID = "lost-edge-restarted";
const STARTING_CREDIT_MICROS = 5_000_000n; // STARTING_CREDIT_USD = 5

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One long streamed answer on `url`. */
const stream = (url: string, apiKey: string, i: number) =>
  streamAnswer(url, apiKey, {
    model: "demo-small",
    max_tokens: LONG,
    messages: [{ role: "user", content: `story ${i}` }],
  });

let databaseUrl: string;
let db: BillingDb;
let edgeA: Child;
let edgeAUrl: string;
/** Edge A's environment but its EDGE_ID and PORT. */
let edgeEnv: Record<string, string>;
let edgeB: EdgeHandle;
let edgeBClosed = false;
const inProcess: Array<() => Promise<void>> = [];

beforeAll(async () => {
  const log = createLogger("e2e", process.env.E2E_LOG_LEVEL ?? "silent");
  databaseUrl = await freshDatabaseUrl();
  const eventsPrefix = freshEventsPrefix();
  const common = { DATABASE_URL: databaseUrl, NATS_URL: TEST_NATS_URL, EVENTS_PREFIX: eventsPrefix, GRPC_PORT: "0" };
  const certs = await testCertificates();
  const modelToken = randomToken(24);
  const secretsKey = randomBytes(32).toString("hex");
  const model = await startHosterServer(
    loadHosterServerConfig({
      HOST: "127.0.0.1",
      PORT: "0",
      HOSTER_SERVER_TOKEN: modelToken,
      DEMO_COMPLETION_TOKENS: String(LONG),
      DEMO_TOKENS_PER_SECOND: String(TOKENS_PER_SECOND),
    }),
    log,
  );
  inProcess.unshift(() => model.close());
  const accounts = await startAccounts(
    loadAccountsConfig({ ...common, ...certs.env("accounts"), METRICS_PORT: "0" }),
    log,
  );
  inProcess.unshift(() => accounts.close());
  const registry = await startRegistry(
    loadRegistryConfig({
      ...common,
      ...certs.env("registry"),
      METRICS_PORT: "0",
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      LOCAL_MODEL_URL: model.url,
      LOCAL_MODEL_TOKEN: modelToken,
      SECRETS_KEY: secretsKey,
      ALLOW_PRIVATE_UPSTREAMS: "true",
    }),
    log,
  );
  inProcess.unshift(() => registry.close());
  const billing = await startBilling(
    loadBillingConfig({
      ...common,
      ...certs.env("billing"),
      METRICS_PORT: "0",
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      REGISTRY_ADDR: `127.0.0.1:${registry.port}`,
      SECRETS_KEY: secretsKey,
      LEASE_TTL_MS: String(LEASE_TTL_MS),
      EDGE_ISOLATION_MS: String(EDGE_ISOLATION_MS),
      // Limits far away: this test is about the dead edge's room, not about refusals.
      TIERS: JSON.stringify({ free: { limit_per_minute: 1_000, limit_per_day: 10_000 } }),
    }),
    log,
  );
  inProcess.unshift(() => billing.close());
  const adminToken = randomToken(24);
  edgeEnv = {
    ...certs.env("edge"),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: eventsPrefix,
    HOST: "127.0.0.1",
    ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
    BILLING_ADDR: `127.0.0.1:${billing.port}`,
    REGISTRY_ADDR: `127.0.0.1:${registry.port}`,
    ADMIN_TOKEN: adminToken,
  };
  const edgePort = await freePort();
  edgeAUrl = `http://127.0.0.1:${edgePort}`;
  edgeA = startChild("edge/src/main.ts", { ...edgeEnv, EDGE_ID: VANISHED_EDGE_ID, PORT: String(edgePort) });
  edgeB = await startEdge(
    loadEdgeConfig({ ...edgeEnv, EDGE_ID: "lost-edge-b", PORT: "0", SHUTDOWN_GRACE_MS: "1000" }),
    log,
  );
  inProcess.unshift(() => (edgeBClosed ? Promise.resolve() : edgeB.close()));
  await waitForReady(edgeAUrl, edgeA);
  db = await openBillingDb(databaseUrl);
}, 60_000);

/** Edge processes the restart test started (killed at the end if still running). */
const restartedChildren: Child[] = [];

afterAll(async () => {
  for (const child of [edgeA, ...restartedChildren]) {
    if (child?.process.exitCode === null && child.process.signalCode === null) child.process.kill("SIGKILL");
  }
  await db?.close();
  for (const close of inProcess) await close().catch(() => undefined);
});

interface LeaseRow {
  id: string;
  edge_id: string;
  status: string;
  held: string;
  released_at: Date | null;
  /** The lease's deadline: the edge session's while open, its own once fenced or closed. */
  deadline: Date;
  [key: string]: unknown;
}

const leaseOf = async (id: string) =>
  (
    await db.query<LeaseRow>(
      `select l.id, l.edge_id, l.status, l.held_micros::text as held, l.released_at,
         coalesce(l.deadline, s.deadline) as deadline
       from leases l join edge_sessions s on s.edge_id = l.edge_id where l.id = $1`,
      [id],
    )
  )[0]!;

const walletOf = async (accountId: string) =>
  (
    await db.query<{ posted: string; held: string }>(
      `select posted_micros::text as posted, held_micros::text as held from wallets where account_id = $1`,
      [accountId],
    )
  )[0]!;

describe("an edge killed with SIGKILL while it holds a lease and streams answers", () => {
  it("charges nothing of its cut answers, keeps a vanished edge's room until deadline + EDGE_ISOLATION_MS, and the other edge serves meanwhile", async () => {
    const { apiKey, accountId } = await signUp(edgeAUrl);

    // 1. Answers streaming through edge A (the child): its lease is the account's only one.
    const streams = Array.from({ length: IN_FLIGHT }, (_, i) => stream(edgeAUrl, apiKey, i));
    await Promise.all(streams.map((s) => s.started));
    // One heartbeat at least (TTL/2) reports the demand and grows the lease ahead of it: room
    // the edge holds and has not used, which only the closer can give back once the edge is dead.
    await sleep(LEASE_TTL_MS);
    const leasesBefore = await db.query<{ id: string; edge_id: string }>(
      `select id, edge_id from leases where account_id = $1`,
      [accountId],
    );
    expect(leasesBefore, "edge A's lease is the account's only one").toHaveLength(1);
    const dead = leasesBefore[0]!;

    // 2. SIGKILL: no final report, no ReturnLeases, no chance to end the streams.
    const killedAt = Date.now();
    edgeA.process.kill("SIGKILL");
    expect(await edgeA.exited).toBeNull();
    const seen = await Promise.all(streams.map((s) => s.finished));
    for (const s of seen) {
      expect(s, s.requestId).toMatchObject({ status: 200, done: false, broken: true });
      expect(s.requestId).not.toBe("");
    }
    // The edge's session stops being renewed: its deadline is now fixed.
    const { deadline } = await leaseOf(dead.id);

    // 3. Meanwhile, edge B serves the account (a lease of its own), and billing keeps the dead
    // lease's hold until deadline + EDGE_ISOLATION_MS. Watch both until the closer releases it.
    const served: Array<{ status: number; at: number }> = [];
    const polls: Array<{ at: Date; lease: LeaseRow; walletHeld: bigint }> = [];
    let releasedLease: LeaseRow | undefined;
    const client = (async () => {
      for (let i = 0; !releasedLease && Date.now() - killedAt < 30_000; i++) {
        const res = await postChat(edgeB.url, apiKey, {
          model: "demo-small",
          max_tokens: 2,
          messages: [{ role: "user", content: `meanwhile ${i}` }],
        });
        await res.text();
        served.push({ status: res.status, at: Date.now() });
        await sleep(200);
      }
    })();
    for (const until = Date.now() + 30_000; !releasedLease && Date.now() < until; await sleep(50)) {
      const [clock] = await db.query<{ now: Date }>(`select clock_timestamp() as now`);
      const lease = await leaseOf(dead.id);
      const walletHeld = BigInt((await walletOf(accountId)).held);
      polls.push({ at: clock!.now, lease, walletHeld });
      if (lease.released_at) releasedLease = lease;
    }
    await client;
    expect(releasedLease, "the closer released the dead edge's lease").toBeDefined();
    const releasedAt = releasedLease!.released_at!;
    const dueAt = deadline.getTime() + EDGE_ISOLATION_MS;

    // Released after deadline + EDGE_ISOLATION_MS, never earlier; by the next closer pass (one TTL).
    const lateMs = releasedAt.getTime() - dueAt;
    console.log(
      `lost edge: deadline ${deadline.getTime() - killedAt} ms after the kill; released ` +
        `${releasedAt.getTime() - killedAt} ms after the kill = deadline + EDGE_ISOLATION_MS + ${lateMs} ms; ` +
        `${served.filter((s) => s.status === 200 && s.at < releasedAt.getTime()).length} answers from edge B before it; ` +
        `held until then: ${polls.filter((p) => !p.lease.released_at).at(-1)?.lease.held} micro-USD`,
    );
    expect(lateMs).toBeGreaterThanOrEqual(0);
    expect(lateMs).toBeLessThan(LEASE_TTL_MS + 2_000);
    // Until then the lease held room, and the wallet held it: nothing came back early.
    const before = polls.filter((p) => !p.lease.released_at);
    expect(before.length).toBeGreaterThan(0);
    for (const p of before) {
      expect(p.lease.status, `at ${p.at.toISOString()}`).not.toBe("closed");
      expect(BigInt(p.lease.held), `at ${p.at.toISOString()}`).toBeGreaterThan(0n);
      expect(p.walletHeld).toBeGreaterThanOrEqual(BigInt(p.lease.held));
    }
    // Polled right up to the due time: the last look before the release was past the deadline.
    expect(before.at(-1)!.at.getTime()).toBeGreaterThan(deadline.getTime());
    // Closed as fully admitted: every unit granted counts as used; nothing is held for it any more.
    expect(releasedLease).toMatchObject({ status: "closed", held: "0" });
    const unreported = await db.figure(
      `select count(*)::text as v from lease_allowances where lease_id = $1 and admitted <> granted`,
      [dead.id],
    );
    expect(unreported).toBe(0n);

    // Edge B served the account while the dead lease still held its room.
    for (const s of served) expect(s.status).toBe(200);
    expect(served.filter((s) => s.at < releasedAt.getTime()).length).toBeGreaterThan(0);
    expect(served[0]!.at - killedAt, "edge B serves at once").toBeLessThan(LEASE_TTL_MS);

    // 4. The requests in flight died with edge A, which relayed them and published nothing of
    // them: none is ever recorded or charged (the closer released their holds with the lease).
    const ids = seen.map((s) => s.requestId);
    expect(await db.figure(`select count(*)::text as v from usage_records where request_id = any($1)`, [ids])).toBe(0n);

    // 5. Conservation: edge B returns its leases on a graceful stop; nothing is held once the
    // requests settle; the balance is the grant less what was charged (write-offs given back).
    await edgeB.close();
    edgeBClosed = true;
    await expect.poll(async () => (await walletOf(accountId)).held, { timeout: 15_000 }).toBe("0");
    await expect
      .poll(() => db.figure(`select count(*)::text as v from leases where status <> 'closed'`), { timeout: 15_000 })
      .toBe(0n);
    const settled = await db.figure(`select count(*)::text as v from usage_records where account_id = $1`, [accountId]);
    expect(settled).toBe(BigInt(served.length));
    const charged = await db.figure(`select sum(cost_micros)::text as v from usage_records where account_id = $1`, [
      accountId,
    ]);
    const writtenOff = await db.figure(
      `select sum(-amount_micros)::text as v from ledger_postings where ledger_account = 'platform:write_offs'`,
    );
    expect(BigInt((await walletOf(accountId)).posted)).toBe(STARTING_CREDIT_MICROS - charged + writtenOff);
    expect(await ledgerInvariants(db)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  }, 60_000);

  it("releases a restarted edge's room at once: its next incarnation (same EDGE_ID) closes the dead one's leases", async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const start = () => {
      const child = startChild("edge/src/main.ts", { ...edgeEnv, EDGE_ID: RESTARTED_EDGE_ID, PORT: String(port) });
      restartedChildren.push(child);
      return child;
    };
    const first = start();
    await waitForReady(url, first);
    const { apiKey, accountId } = await signUp(url);
    const streams = Array.from({ length: 3 }, (_, i) => stream(url, apiKey, i));
    await Promise.all(streams.map((s) => s.started));
    await sleep(LEASE_TTL_MS);
    const [dead] = await db.query<{ id: string }>(`select id from leases where account_id = $1`, [accountId]);
    expect(BigInt((await leaseOf(dead!.id)).held)).toBeGreaterThan(0n);

    const killedAt = Date.now();
    first.process.kill("SIGKILL");
    await first.exited;
    await Promise.all(streams.map((s) => s.finished));
    const { deadline } = await leaseOf(dead!.id);

    // The same EDGE_ID again: its heartbeat at start takes the next incarnation.
    const second = start();
    await waitForReady(url, second);
    const readyAt = Date.now();
    await expect
      .poll(async () => (await leaseOf(dead!.id)).released_at, { timeout: 5_000, interval: 50 })
      .not.toBeNull();
    const released = await leaseOf(dead!.id);
    const releasedAt = released.released_at!.getTime();
    console.log(
      `restarted edge: ready ${readyAt - killedAt} ms after the kill; its previous lease released ` +
        `${releasedAt - killedAt} ms after the kill, ${deadline.getTime() + EDGE_ISOLATION_MS - releasedAt} ms ` +
        `before its deadline + EDGE_ISOLATION_MS`,
    );
    // At once: by the new process's first heartbeat (TTL / 2 after its start), not at a deadline.
    expect(releasedAt).toBeLessThan(readyAt + LEASE_TTL_MS);
    expect(releasedAt).toBeLessThan(deadline.getTime() + EDGE_ISOLATION_MS / 2);
    expect(released).toMatchObject({ status: "closed", held: "0" });
    // Nothing of the account is held any more: its cut requests were never published.
    expect(BigInt((await walletOf(accountId)).held)).toBe(0n);
    // And the restarted edge serves the account.
    const res = await postChat(url, apiKey, {
      model: "demo-small",
      max_tokens: 2,
      messages: [{ role: "user", content: "after the restart" }],
    });
    expect(res.status).toBe(200);
    await res.text();
  }, 60_000);
});
