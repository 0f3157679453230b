import { randomBytes } from "node:crypto";
import { freePort } from "@mkt/testkit/ports";
import { createLogger } from "@mkt/runtime/logger";
import { randomToken } from "@mkt/runtime/ids";
import { freshDatabaseUrl, freshEventsPrefix, TEST_NATS_URL } from "@mkt/testkit/env";
import { loadAccountsConfig } from "../../services/accounts/src/config.ts";
import { startAccounts } from "../../services/accounts/src/server.ts";
import { loadBillingConfig } from "../../services/billing/src/config.ts";
import { startBilling } from "../../services/billing/src/server.ts";
import { loadRegistryConfig } from "../../services/registry/src/config.ts";
import { startRegistry } from "../../services/registry/src/server.ts";
import { loadHosterServerConfig } from "../../hoster-server/src/config.ts";
import { startHosterServer } from "../../hoster-server/src/server.ts";
import { loadEdgeConfig } from "../../edge/src/config.ts";
import { startEdge } from "../../edge/src/server.ts";

export const DEMO_PRICES = { input: 500_000n, output: 1_500_000n }; // micro-USD per 1M tokens

export interface RunningSystem {
  /** Base URL of the (first) edge, e.g. http://127.0.0.1:41234 */
  url: string;
  /** Base URLs of every edge; they share one accounts, billing and registry. */
  urls: string[];
  databaseUrl: string;
  eventsPrefix: string;
  adminToken: string;
  close(): Promise<void>;
}

/**
 * The whole system in this test process: every service is its real implementation listening on
 * a loopback port, talking real gRPC, a fresh Postgres database and fresh NATS subjects.
 */
export async function startSystem(
  overrides: {
    billing?: Record<string, string>;
    registry?: Record<string, string>;
    model?: Record<string, string>;
    /** How many edge instances to run side by side (default 1), as behind a load balancer. */
    edges?: number;
  } = {},
): Promise<RunningSystem> {
  const log = createLogger("e2e", process.env.E2E_LOG_LEVEL ?? "silent");
  const databaseUrl = await freshDatabaseUrl();
  const eventsPrefix = freshEventsPrefix();
  const common = { DATABASE_URL: databaseUrl, NATS_URL: TEST_NATS_URL, EVENTS_PREFIX: eventsPrefix, GRPC_PORT: "0" };
  const modelToken = randomToken(24);
  const adminToken = randomToken(24);

  const model = await startHosterServer(
    loadHosterServerConfig({ HOST: "127.0.0.1", PORT: "0", HOSTER_SERVER_TOKEN: modelToken, ...overrides.model }),
    log,
  );
  const secretsKey = randomBytes(32).toString("hex");
  const accounts = await startAccounts(loadAccountsConfig({ ...common }), log);
  // Billing and registry call each other; registry's port is known only once it listens, so
  // billing gets a free port reserved up front (its gRPC client connects lazily).
  const registryPort = await freePort();
  const billing = await startBilling(
    loadBillingConfig({
      ...common,
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      REGISTRY_ADDR: `127.0.0.1:${registryPort}`,
      SECRETS_KEY: secretsKey,
      ...overrides.billing,
    }),
    log,
  );
  const registry = await startRegistry(
    loadRegistryConfig({
      ...common,
      GRPC_PORT: String(registryPort),
      METRICS_PORT: "0",
      BILLING_ADDR: `127.0.0.1:${billing.port}`,
      ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
      LOCAL_MODEL_URL: model.url,
      LOCAL_MODEL_TOKEN: modelToken,
      SECRETS_KEY: secretsKey,
      // Test hoster servers listen on loopback.
      ALLOW_PRIVATE_UPSTREAMS: "true",
      ...overrides.registry,
    }),
    log,
  );
  const edgeConfig = loadEdgeConfig({
    HOST: "127.0.0.1",
    PORT: "0",
    NATS_URL: TEST_NATS_URL,
    EVENTS_PREFIX: eventsPrefix,
    ACCOUNTS_ADDR: `127.0.0.1:${accounts.port}`,
    BILLING_ADDR: `127.0.0.1:${billing.port}`,
    REGISTRY_ADDR: `127.0.0.1:${registry.port}`,
    ADMIN_TOKEN: adminToken,
  });
  const edges = await Promise.all(Array.from({ length: overrides.edges ?? 1 }, () => startEdge(edgeConfig, log)));
  return {
    url: edges[0]!.url,
    urls: edges.map((edge) => edge.url),
    databaseUrl,
    eventsPrefix,
    adminToken,
    async close() {
      await Promise.all(edges.map((edge) => edge.close()));
      await registry.close();
      await billing.close();
      await accounts.close();
      await model.close();
    },
  };
}

/** Signs up a fresh customer through the public API and returns its key. */
export async function signUp(url: string): Promise<{ apiKey: string; accountId: string; email: string }> {
  const email = `user-${randomToken(6)}@example.com`;
  const res = await fetch(`${url}/v1/accounts`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "correct horse battery staple" }),
  });
  if (res.status !== 201) throw new Error(`sign-up failed: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as { api_key: string; account_id: string };
  return { apiKey: body.api_key, accountId: body.account_id, email };
}

/** Polls GET /v1/usage until `predicate` holds (settlement is asynchronous, through JetStream). */
export async function waitForUsage<T>(
  url: string,
  apiKey: string,
  predicate: (usage: T) => boolean,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${url}/v1/usage`, { headers: { authorization: `Bearer ${apiKey}` } });
    const usage = (await res.json()) as T;
    if (res.ok && predicate(usage)) return usage;
    if (Date.now() > deadline) throw new Error(`usage never matched: ${JSON.stringify(usage)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
