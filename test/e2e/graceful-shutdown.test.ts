/**
 * A rolling deploy under load: SIGTERM reaches the edge while 100 answers stream through it, then
 * the registry while more stream through a second edge (which relays them itself: registry's
 * shutdown must not touch them). The edge and the registry run as child
 * processes (the real `main.ts`, so the signal, the shutdown steps and the exit code are real);
 * the model server, accounts and billing run in this process and stay up, so what the shutdowns
 * left behind can be read from billing's tables afterwards.
 */
import { get } from "node:http";
import { randomBytes } from "node:crypto";
import { freePort } from "@mkt/testkit/ports";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomToken } from "@mkt/runtime/ids";
import { createLogger } from "@mkt/runtime/logger";
import { countTextTokens } from "@mkt/runtime/tokens";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { testCertificates } from "@mkt/testkit/test-certificates";
import { loadAccountsConfig } from "../../services/accounts/src/config.ts";
import { startAccounts } from "../../services/accounts/src/server.ts";
import { loadBillingConfig } from "../../services/billing/src/config.ts";
import { startBilling } from "../../services/billing/src/server.ts";
import { ledgerInvariants } from "../../services/billing/test/billing-harness.ts";
import { loadHosterServerConfig } from "../../hoster-server/src/config.ts";
import { startHosterServer } from "../../hoster-server/src/server.ts";
import { loadEdgeConfig } from "../../edge/src/config.ts";
import { startEdge, type EdgeHandle } from "../../edge/src/server.ts";
import { openBillingDb, postChat, type BillingDb } from "./billing-db.ts";
import { startChild, waitForReady, type Child } from "./child-process.ts";
import { signUp } from "./system.ts";

// The demo model streams 20 tokens/s: a short answer (30 tokens) takes 1.5 s, a long one (120) 6 s.
const TOKENS_PER_SECOND = 20;
const SHORT = 30;
const LONG = 120;
const EDGE_READINESS_DELAY_MS = 500;
const EDGE_GRACE_MS = 3_000;
const REGISTRY_GRACE_MS = 2_500;

/** A child process running one of the system's `main.ts`, with the end of its output kept for failures. */
/** GET /readyz on a fresh connection, as a kubelet probes: the status, or 0 when refused. */
function probe(url: string): Promise<number> {
  return new Promise((resolve) => {
    get(`${url}/readyz`, { agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    }).on("error", () => resolve(0));
  });
}

/** Probes readiness from the moment of the signal until it changes; resolves with its new status. */
async function readinessAfterSignal(url: string): Promise<{ status: number; ms: number }> {
  const start = Date.now();
  for (;;) {
    const status = await probe(url);
    if (status !== 200 || Date.now() - start > 2_000) return { status, ms: Date.now() - start };
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** What a client saw of one streamed answer. */
interface Streamed {
  requestId: string;
  status: number;
  maxTokens: number;
  content: string;
  /** The stream ended with `data: [DONE]`. */
  done: boolean;
  /** The final error event, when the stream ended with one. */
  error?: { code: string; finishReason: string };
  usage?: { completion_tokens: number };
  /** The stream ended in neither way (a silent truncation), or the connection failed. */
  truncated: boolean;
}

/**
 * Starts one streamed request; `started` resolves once its first words arrived (it is mid-flight),
 * `finished` with everything the client saw.
 */
function stream(url: string, apiKey: string, maxTokens: number, i: number) {
  let markStarted!: () => void;
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const finished = (async (): Promise<Streamed> => {
    const res = await postChat(url, apiKey, {
      model: "demo-small",
      max_tokens: maxTokens,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: `story ${i}` }],
    });
    const seen: Streamed = {
      requestId: res.headers.get("x-request-id") ?? "",
      status: res.status,
      maxTokens,
      content: "",
      done: false,
      truncated: false,
    };
    if (res.status !== 200) {
      markStarted();
      seen.truncated = true;
      return seen;
    }
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for await (const bytes of res.body!) {
        buffer += decoder.decode(bytes, { stream: true });
        let end: number;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, end).replace(/^data: /, "");
          buffer = buffer.slice(end + 2);
          if (event === "[DONE]") {
            seen.done = true;
            continue;
          }
          const chunk = JSON.parse(event) as {
            choices?: Array<{ delta?: { content?: string }; finish_reason?: string | null }>;
            usage?: { completion_tokens: number };
            error?: { code: string };
          };
          if (chunk.error) {
            seen.error = { code: chunk.error.code, finishReason: chunk.choices?.[0]?.finish_reason ?? "" };
          }
          if (chunk.usage) seen.usage = chunk.usage;
          const words = chunk.choices?.[0]?.delta?.content;
          if (words) {
            seen.content += words;
            markStarted();
          }
        }
      }
    } catch {
      seen.truncated = true;
    }
    if (!seen.done && !seen.error) seen.truncated = true;
    markStarted();
    return seen;
  })();
  return { started, finished };
}

let databaseUrl: string;
let db: BillingDb;
let registry: Child;
let edgeA: Child;
let edgeAUrl: string;
let edgeB: EdgeHandle;
const inProcess: Array<() => Promise<void>> = [];

beforeAll(async () => {
  const log = createLogger("e2e", process.env.E2E_LOG_LEVEL ?? "silent");
  databaseUrl = await freshDatabaseUrl();
  const eventsPrefix = freshEventsPrefix();
  const common = { DATABASE_URL: databaseUrl, NATS_URL: TEST_NATS_URL, EVENTS_PREFIX: eventsPrefix };
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
    loadAccountsConfig({ ...common, ...certs.env("accounts"), GRPC_PORT: "0", METRICS_PORT: "0" }),
    log,
  );
  inProcess.unshift(() => accounts.close());
  const registryPort = await freePort();
  const billing = await startBilling(
    loadBillingConfig({
      ...common,
      ...certs.env("billing"),
      GRPC_PORT: "0",
      METRICS_PORT: "0",
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      REGISTRY_ADDR: `127.0.0.1:${registryPort}`,
      SECRETS_KEY: secretsKey,
      TIERS: JSON.stringify({ free: { limit_per_minute: 1_000, limit_per_day: 10_000 } }),
    }),
    log,
  );
  inProcess.unshift(() => billing.close());
  const backends = {
    ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
    BILLING_ADDR: `127.0.0.1:${billing.port}`,
    REGISTRY_ADDR: `127.0.0.1:${registryPort}`,
  };
  registry = startChild("services/registry/src/main.ts", {
    ...common,
    ...certs.env("registry"),
    GRPC_PORT: String(registryPort),
    METRICS_PORT: "0",
    ACCOUNTS_ADDR: backends.ACCOUNTS_ADDR,
    LOCAL_MODEL_URL: model.url,
    LOCAL_MODEL_TOKEN: modelToken,
    SECRETS_KEY: secretsKey,
    ALLOW_PRIVATE_UPSTREAMS: "true",
    SHUTDOWN_GRACE_MS: String(REGISTRY_GRACE_MS),
  });
  const adminToken = randomToken(24);
  const edgePort = await freePort();
  edgeAUrl = `http://127.0.0.1:${edgePort}`;
  edgeA = startChild("edge/src/main.ts", {
    ...certs.env("edge"),
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: eventsPrefix,
    HOST: "127.0.0.1",
    PORT: String(edgePort),
    ...backends,
    ADMIN_TOKEN: adminToken,
    SHUTDOWN_READINESS_DELAY_MS: String(EDGE_READINESS_DELAY_MS),
    SHUTDOWN_GRACE_MS: String(EDGE_GRACE_MS),
  });
  edgeB = await startEdge(
    loadEdgeConfig({
      ...certs.env("edge"),
      EDGE_ID: "graceful-edge-b",
      HOST: "127.0.0.1",
      PORT: "0",
      NATS_URL: TEST_NATS_URL,
      EVENTS_PREFIX: eventsPrefix,
      ...backends,
      ADMIN_TOKEN: adminToken,
      SHUTDOWN_GRACE_MS: "1000",
      // Its idle leases go back after 2 TTL (not the default minute): the test waits for nothing
      // to stay held while it runs (idle-leases.test.ts checks the shown balance with the default).
      LEASE_IDLE_MS: "4000",
    }),
    log,
  );
  inProcess.unshift(() => edgeB.close());
  await waitForReady(edgeAUrl, edgeA);
  await waitForReady(edgeAUrl, registry); // the edge is ready only once it reaches the registry
  db = await openBillingDb(databaseUrl);
}, 30_000);

afterAll(async () => {
  for (const child of [edgeA, registry]) if (child?.process.exitCode === null) child.process.kill("SIGKILL");
  await db?.close();
  for (const close of inProcess) await close().catch(() => undefined);
});

/** Sends SIGTERM and resolves with the exit code and how long the process took to exit. */
async function terminate(child: Child): Promise<{ code: number | null; ms: number }> {
  const start = Date.now();
  child.process.kill("SIGTERM");
  const code = await child.exited;
  return { code, ms: Date.now() - start };
}

describe("graceful shutdown during 100 streams", () => {
  it("edge then registry: readiness off, answers finish or end with an error event, everything is settled", async () => {
    const accounts = await Promise.all([0, 1, 2, 3].map(() => signUp(edgeB.url)));
    const key = (i: number) => accounts[i % accounts.length]!.apiKey;

    // 1. The edge: 96 answers that fit in its grace period and 4 that do not.
    const first = Array.from({ length: 100 }, (_, i) => stream(edgeAUrl, key(i), i < 96 ? SHORT : LONG, i));
    await Promise.all(first.map((s) => s.started));
    const edgeExit = terminate(edgeA);
    // The probe sees 503 (not a refused connection) at once: load balancers stop sending first.
    const readiness = await readinessAfterSignal(edgeAUrl);
    expect(readiness.status, "readiness turns off at once").toBe(503);
    expect(readiness.ms).toBeLessThan(EDGE_READINESS_DELAY_MS);
    const seenA = await Promise.all(first.map((s) => s.finished));
    const { code: edgeCode, ms: edgeMs } = await edgeExit;
    expect(edgeCode, edgeA.output()).toBe(0);
    // The margin covers the process's exit and its leases' return to billing (one ReturnLeases).
    expect(edgeMs).toBeLessThan(EDGE_READINESS_DELAY_MS + EDGE_GRACE_MS + 5_000);

    // 2. The registry, while answers stream through the other edge: 10 fit in its grace, 2 do not,
    // and every one finishes whole, as the edge relays them and routes from the table it holds.
    const second = Array.from({ length: 12 }, (_, i) => stream(edgeB.url, key(i), i < 10 ? SHORT : LONG, 100 + i));
    await Promise.all(second.map((s) => s.started));
    const { code: registryCode, ms: registryMs } = await terminate(registry);
    const seenB = await Promise.all(second.map((s) => s.finished));
    expect(registryCode, registry.output()).toBe(0);
    expect(registryMs).toBeLessThan(REGISTRY_GRACE_MS + 5_000);

    // What clients saw: admitted, then a whole answer or a final error event, never a truncation.
    const seen = [...seenA, ...seenB];
    for (const s of seen) {
      expect(s, s.requestId).toMatchObject({ status: 200, truncated: false });
      if (s.maxTokens === SHORT || seenB.includes(s)) {
        expect(s.done, "a short answer finishes within the grace period; registry's ends none").toBe(true);
        expect(s.error).toBeUndefined();
        expect(s.usage?.completion_tokens).toBe(s.maxTokens);
      } else {
        expect(s, "a long answer outlives the grace period").toMatchObject({ done: false });
        expect(s.error?.finishReason).toBe("error");
      }
    }
    for (const s of seenA.slice(96)) expect(s.error?.code).toBe("service_unavailable");

    // Billing (still up) settles every admitted request exactly once from JetStream.
    const count = () => db.figure(`select count(*)::text as v from usage_records`);
    for (const deadline = Date.now() + 10_000; (await count()) < BigInt(seen.length);) {
      if (Date.now() > deadline) throw new Error(`only ${await count()} of ${seen.length} requests settled`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const records = await db.query<{
      request_id: string;
      output_tokens: string;
      success: boolean;
      error_code: string | null;
    }>(`select request_id, output_tokens::text, success, error_code from usage_records`);
    expect(records).toHaveLength(seen.length);
    const byRequest = new Map(records.map((r) => [r.request_id, r]));
    for (const s of seen) {
      const record = byRequest.get(s.requestId);
      expect(record, s.requestId).toBeDefined();
      // Billed output never exceeds what reached the client; a whole answer bills what it reported.
      // An answer the edge cut is exact: the edge ends it itself, its final event after every
      // chunk it counted.
      expect(BigInt(record!.output_tokens)).toBeLessThanOrEqual(BigInt(countTextTokens(s.content)));
      if (s.done) expect(record).toMatchObject({ success: true, output_tokens: String(s.maxTokens) });
      else expect(record!.success).toBe(false);
    }
    // The edge knows it cut them: recorded as what their clients were told.
    const codeOf = (s: Streamed) => byRequest.get(s.requestId)!.error_code;
    expect(seenA.slice(96).map(codeOf)).toEqual(Array(4).fill("service_unavailable"));

    // The edge returned its leases on the way out: once every request settled nothing is held.
    await expect.poll(() => db.figure(`select sum(held_micros)::text as v from wallets`), { timeout: 30_000 }).toBe(0n);
    expect(await db.figure(`select count(*)::text as v from leases where status <> 'closed'`)).toBe(0n);
    expect(await ledgerInvariants(db)).toEqual({ totalPostings: 0n, unbalancedEntries: 0, mismatchedWallets: 0 });
  }, 60_000);
});
